package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gomhi/gomhi/pcigeneric"
)

// errNotModemGroup: `mhictl deploy vfio-group N` found no modem in group N
// (the udev rule's PROGRAM then does not match).
var errNotModemGroup = errors.New("no modem of the device table")

// newDeployCmd returns "mhictl deploy": what a machine with a real modem
// needs to run `mhictl up --device` as a service (docs/DEPLOY.md).
func newDeployCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "Deployment helpers for real modems: the udev rule, the VFIO group check",
		Long: `The pieces a machine with a real modem needs to run 'mhictl up --device ADDR'
as a service (docs/DEPLOY.md; the systemd unit is deploy/systemd/mhictl@.service):
'deploy udev-rule' prints the udev rule that hands the modems of the device
table to vfio-pci and their VFIO group nodes to the service's group;
'deploy vfio-group N' is the check that rule runs.`,
	}
	cmd.AddCommand(newUdevRuleCmd(), newVFIOGroupCmd())
	return cmd
}

func newUdevRuleCmd() *cobra.Command {
	var opts pcigeneric.UdevRuleOptions
	cmd := &cobra.Command{
		Use:   "udev-rule",
		Short: "Print the udev rule that hands the table's modems to vfio-pci (" + pcigeneric.UdevRuleName + ")",
		Long: `Prints the udev rule, generated from the device table, that on a modem's
arrival writes vfio-pci to its driver_override, loads vfio-pci and runs
'mhictl bind' (so mhi-pci-generic never keeps it), and gives the VFIO group
node /dev/vfio/N of an IOMMU group holding a modem to --group, mode 0660, so
that a service running as that group can open it. Groups of other devices
stay root's.`,
		Example: `  mhictl deploy udev-rule | sudo tee /etc/udev/rules.d/` + pcigeneric.UdevRuleName + `
  sudo udevadm control --reload && sudo udevadm trigger --subsystem-match=pci --action=add`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return pcigeneric.WriteUdevRule(cmd.OutOrStdout(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Group, "group", pcigeneric.DefaultServiceGroup, "group given the modems' VFIO group nodes (the service's group)")
	cmd.Flags().StringVar(&opts.Mhictl, "mhictl", pcigeneric.DefaultMhictlPath, "absolute path of the mhictl the rule runs")
	return cmd
}

func newVFIOGroupCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "vfio-group N",
		Short: "Succeed if IOMMU group N holds a modem of the device table (the udev rule's check)",
		Long: `Exits 0 and prints the modems' addresses if IOMMU group N holds a modem of
the device table, else exits 1. The udev rule runs it for every VFIO group
node /dev/vfio/N to decide whether the node goes to the service's group.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			modems, err := pcigeneric.IOMMUGroupModems(root, args[0])
			if err != nil {
				return err
			}
			if len(modems) == 0 {
				return fmt.Errorf("IOMMU group %s holds %w", args[0], errNotModemGroup)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(modems, " "))
			return err
		},
	}
	cmd.Flags().StringVar(&root, "sysfs-root", pcigeneric.DefaultRoot, sysfsRootUsage)
	return cmd
}
