package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/pcigeneric"
)

// newBindCmd returns "mhictl bind ADDR": hand a modem over to vfio-pci.
func newBindCmd() *cobra.Command {
	var (
		root   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "bind ADDR",
		Short: "Bind a modem to vfio-pci (driver_override, unbind, drivers_probe)",
		Long: `Bind detaches the modem at PCI address ADDR (e.g. 0000:01:00.0) from its
current driver and binds it to vfio-pci, so that "mhictl up --device ADDR" can
drive it from user space. Only modems of the pci_generic table are accepted.
Needs root and the vfio-pci module.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := pcigeneric.Bind(root, args[0])
			if err != nil {
				return err
			}
			return printBindResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	cmd.Flags().StringVar(&root, "sysfs-root", pcigeneric.DefaultRoot, sysfsRootUsage)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// newUnbindCmd returns "mhictl unbind ADDR": release a modem from its driver.
func newUnbindCmd() *cobra.Command {
	var (
		root    string
		asJSON  bool
		reprobe bool
	)
	cmd := &cobra.Command{
		Use:   "unbind ADDR",
		Short: "Release a modem: clear driver_override and unbind it from its driver",
		Long: `Unbind clears the driver_override of the modem at PCI address ADDR and
unbinds it from its driver (normally vfio-pci). With --reprobe the PCI bus is
then asked to probe the device again, so mhi-pci-generic can take it back.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := pcigeneric.Unbind(root, args[0], reprobe)
			if err != nil {
				return err
			}
			return printBindResult(cmd.OutOrStdout(), res, asJSON)
		},
	}
	cmd.Flags().StringVar(&root, "sysfs-root", pcigeneric.DefaultRoot, sysfsRootUsage)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&reprobe, "reprobe", false, "probe the device again after unbinding (lets its default driver take it)")
	return cmd
}

// printBindResult prints what bind or unbind did.
func printBindResult(w io.Writer, res pcigeneric.BindResult, asJSON bool) error {
	if asJSON {
		return printJSON(w, res)
	}
	if !res.Changed {
		_, err := fmt.Fprintf(w, "%s: nothing to do (driver: %s)\n", res.Address, orNone(res.Driver))
		return err
	}
	_, err := fmt.Fprintf(w, "%s: driver %s -> %s\n", res.Address, orNone(res.Previous), orNone(res.Driver))
	return err
}
