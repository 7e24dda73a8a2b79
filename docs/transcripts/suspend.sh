# The Linux side of the M3/M0 comparison (docs/FIDELITY.md §10): run by
# 'mhictl lab run --serve-args "--transcript FILE" suspend.sh' in the guest
# once Linux's mhi_pci_generic and mhi_net have the modem. Pings the mock's
# gateway five times, stays idle 4 s (mhi_pci_generic's autosuspend, 2 s,
# takes the modem to M3 and the function to D3hot), pings five times (the
# first wakes it: D0, M0) and ends; the guest powers off.
ping -c 5 -W 5 "$LAB_PEER"
sleep 4
echo "SUSPEND runtime_status $(cat /sys/bus/pci/devices/*/power/runtime_status 2>/dev/null | tr '\n' ' ')"
ping -c 5 -W 5 "$LAB_PEER"
