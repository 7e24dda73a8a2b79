package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/pcigeneric"
)

// sysfsRootUsage documents the --sysfs-root flag of list, bind and unbind.
const sysfsRootUsage = "sysfs mount point (or its bus/pci/devices directory) to use; a fixture tree works too"

// newListCmd returns "mhictl list": the MHI modems found on the PCI bus.
func newListCmd() *cobra.Command {
	var (
		root   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the MHI modems on the PCI bus and what each needs for VFIO",
		Long: `List scans the PCI devices in sysfs for modems of the pci_generic table and
prints, for each, its address, model, IDs, bound driver, IOMMU group, default
MRU and a hint of what to do next. Devices that cannot be read are reported on
stderr (or under "problems" with --json) and do not make the command fail.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scan, err := pcigeneric.Discover(root)
			if err != nil {
				return err
			}
			if asJSON {
				return scan.WriteJSON(cmd.OutOrStdout())
			}
			if err := printModemTable(cmd.OutOrStdout(), scan.Modems); err != nil {
				return err
			}
			for _, p := range scan.Problems {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n", p)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "sysfs-root", pcigeneric.DefaultRoot, sysfsRootUsage)
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"modems": […], "problems": […]} as JSON`)
	return cmd
}

// printModemTable prints one line per modem.
func printModemTable(w io.Writer, modems []pcigeneric.Modem) error {
	if len(modems) == 0 {
		_, err := fmt.Fprintln(w, "no MHI modems found")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tNAME\tPRODUCT\tIDS\tDRIVER\tIOMMU\tMRU\tHINT")
	for _, m := range modems {
		mru := "auto"
		if m.MRUDefault > 0 {
			mru = strconv.Itoa(m.MRUDefault)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			m.Address, m.Name, m.Product, m.IDs(), orNone(m.Driver), orNone(m.IOMMUGroup), mru, m.Hint)
	}
	return tw.Flush()
}

// orNone shows an empty attribute as "none".
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
