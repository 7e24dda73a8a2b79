package sysfs

// StatDocNames lists, per counter group, the attributes statDocs
// describes, for the test that no entry is stale.
func StatDocNames() map[string][]string {
	out := map[string][]string{}
	for g, docs := range statDocs {
		for name := range docs {
			out[g] = append(out[g], name)
		}
	}
	return out
}

// Undocumented is the prefix of the description of an attribute statDocs
// lacks.
const Undocumented = undocumented
