package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/gomhi/gomhi/internal/atomicfile"
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
// Each page is named as doc.GenManTree names it (mhictl-up.1), but
// written with atomicfile rather than by GenManTree's os.Create, so that
// a page is replaced only by a complete one.
func genMan(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	root := newRootCmd()
	root.InitDefaultCompletionCmd()
	hdr := doc.GenManHeader{Section: "1", Date: &manDate, Source: "gomhi", Manual: "gomhi manual"}
	var walk func(c *cobra.Command) error
	n := 0
	walk = func(c *cobra.Command) error {
		c.DisableAutoGenTag = true
		n++
		page := filepath.Join(dir, strings.ReplaceAll(c.CommandPath(), " ", "-")+"."+hdr.Section)
		err := atomicfile.Write(page, 0o666, 0, func(w io.Writer) error {
			h := hdr // GenMan fills in the title: one copy per page
			return doc.GenMan(c, &h, w)
		})
		if err != nil {
			return err
		}
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() && !s.IsAdditionalHelpTopicCommand() {
				if err := walk(s); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return n, walk(root)
}
