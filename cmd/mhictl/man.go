package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manDate is the date the manual pages carry. It is fixed, not the day
// they were generated, so that `make man` reproduces the checked-in pages
// byte for byte (TestManPagesCurrent); move it forward when the commands
// change in a release.
var manDate = time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC)

// newGenManCmd returns the hidden "mhictl gen-man DIR": one manual page
// per command, from the commands' own help (what `make man` runs).
func newGenManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write the manual pages (mhictl.1, mhictl-up.1…) to DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := genMan(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d manual pages in %s\n", n, args[0])
			return nil
		},
	}
}

// genMan writes a manual page for every command of a fresh command tree,
// including cobra's completion commands, to dir and returns how many.
func genMan(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	root := newRootCmd()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		n++
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() && !s.IsAdditionalHelpTopicCommand() {
				walk(s)
			}
		}
	}
	walk(root)
	hdr := &doc.GenManHeader{Section: "1", Date: &manDate, Source: "gomhi", Manual: "gomhi manual"}
	return n, doc.GenManTree(root, hdr, dir)
}
