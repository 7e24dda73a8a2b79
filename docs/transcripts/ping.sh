# The Linux side of the transcript comparison (docs/FIDELITY.md §10):
# run by 'mhictl lab run --serve-args "--transcript FILE" ping.sh' in the
# guest once Linux's mhi_pci_generic and mhi_net have the modem; pings the
# mock's gateway ten times, then ends, and the guest powers off.
ping -c 10 -W 5 "$LAB_PEER"
