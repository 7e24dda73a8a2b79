package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gomhi/gomhi/mhi/testenv"
)

// TestManPagesCurrent: the manual pages in docs/man are what `make man`
// generates from the commands now: regenerated in a temporary directory,
// every page is byte for byte the checked-in one and no page is missing or
// left over.
func TestManPagesCurrent(t *testing.T) {
	const dir = "../../docs/man"
	tmp := t.TempDir()
	n, err := genMan(tmp)
	if err != nil {
		t.Fatal(err)
	}
	names := func(d string) []string {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	want, have := names(tmp), names(dir)
	if len(want) != n || n < 20 {
		t.Fatalf("%d pages generated, %d files", n, len(want))
	}
	for _, name := range want {
		if !slices.Contains(have, name) {
			t.Errorf("docs/man lacks %s: run make man", name)
			continue
		}
		a, _ := os.ReadFile(filepath.Join(tmp, name))
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if !bytes.Equal(a, b) {
			t.Errorf("docs/man/%s is stale: run make man", name)
		}
	}
	for _, name := range have {
		if !slices.Contains(want, name) {
			t.Errorf("docs/man/%s is for no command: run make man (it removes it)", name)
		}
	}
	for _, page := range []string{"mhictl.1", "mhictl-up.1", "mhictl-deploy-udev-rule.1", "mhictl-completion-bash.1", "mhictl-completion-zsh.1", "mhictl-completion-fish.1"} {
		if !slices.Contains(want, page) {
			t.Errorf("no page %s", page)
		}
	}
}

// TestCompletion: `mhictl completion bash` works in bash: sourced, its
// completion function offers the commands and subcommands (it asks the
// binary, as `mhictl __complete …`); the zsh and fish scripts are
// generated for mhictl.
func TestCompletion(t *testing.T) {
	bash := testenv.LookPath(t, "bash", "bash")
	// cobra's script uses bash-completion's helpers, as installed shells
	// have them (Debian: the bash-completion package).
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	_, err := os.Stat(bashCompletion)
	testenv.Need(t, bashCompletion+" (Debian package bash-completion)", err)
	// A directory with "mhictl" running this test binary as mhictl.
	dir := t.TempDir()
	wrapper := "#!/bin/sh\nGOMHI_RUN_MHICTL=1 exec " + os.Args[0] + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "mhictl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := run(t, "completion", "bash")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mhictl.bash"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(line string) []string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := "source " + bashCompletion + "\nsource " + filepath.Join(dir, "mhictl.bash") + "\n" +
			"COMP_WORDS=(" + strings.Join(quoted, " ") + ")\n" +
			"COMP_CWORD=" + itoa(len(words)-1) + "\n" +
			"COMP_LINE='" + line + "'\nCOMP_POINT=${#COMP_LINE}\n" +
			"__start_mhictl mhictl '" + words[len(words)-1] + "' '" + words[max(0, len(words)-2)] + "'\n" +
			"printf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s", line, err, out)
		}
		return strings.Fields(string(out))
	}
	if got := complete("mhictl u"); !slices.Contains(got, "up") || !slices.Contains(got, "unbind") || slices.Contains(got, "list") {
		t.Errorf("completing 'mhictl u': %q", got)
	}
	if got := complete("mhictl deploy "); !slices.Contains(got, "udev-rule") || !slices.Contains(got, "vfio-group") {
		t.Errorf("completing 'mhictl deploy ': %q", got)
	}
	if got := complete("mhictl up --tu"); !slices.Contains(got, "--tun") && !slices.Contains(got, "--tun=") {
		t.Errorf("completing 'mhictl up --tu': %q", got)
	}
	for shell, want := range map[string]string{"zsh": "#compdef mhictl", "fish": "complete -c mhictl"} {
		out, err := run(t, "completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: %v, lacks %q", shell, err, want)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
