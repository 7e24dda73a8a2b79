package transcript

import "strings"

// commandsRung names, for each command-ring doorbell and command
// completion of recs (by index), the command it is about, "TYPE chan=N":
// a doorbell the command the device reads next, a completion the command
// at the slot it completes (cmd#N). The doorbells and completions of two
// hosts are then aligned with their commands: all of them look alike
// otherwise, and a longest common subsequence pairs one host's with the
// other's for another command, reporting the commands themselves moved.
func commandsRung(recs []Record) map[int]string {
	about := map[int]string{}
	next := ""
	for i := len(recs) - 1; i >= 0; i-- {
		rec := &recs[i]
		switch {
		case rec.Kind == KindElement && rec.Name == "cmd":
			next = commandName(rec)
		case rec.Kind == KindDoorbell && rec.Name == "cmd" && next != "":
			about[i] = next
		}
	}
	atSlot := map[string]string{}
	for i := range recs {
		rec := &recs[i]
		switch {
		case rec.Kind == KindElement && rec.Name == "cmd":
			atSlot[rec.Fields["slot"]] = commandName(rec)
		case rec.Kind == KindEvent && strings.HasPrefix(rec.Fields["cmd"], "cmd#"):
			if c, ok := atSlot[strings.TrimPrefix(rec.Fields["cmd"], "cmd#")]; ok {
				about[i] = c
			}
		}
	}
	return about
}

// commandName is a command element's type and channel.
func commandName(rec *Record) string {
	return rec.Fields["type"] + " chan=" + rec.Fields["chan"]
}

// withCommand returns a copy of rec that names the command it is about
// (field "for").
func withCommand(rec *Record, about string) *Record {
	c := *rec
	c.Fields = make(map[string]string, len(rec.Fields)+1)
	for k, v := range rec.Fields {
		c.Fields[k] = v
	}
	c.Fields["for"] = about
	return &c
}
