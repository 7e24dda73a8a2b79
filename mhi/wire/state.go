package wire

import "fmt"

// State is an MHI state as carried in MHICTRL/MHISTATUS bits [15:8] and in
// state-change events.
type State uint8

// MHI states.
const (
	StateReset  State = 0x0
	StateReady  State = 0x1
	StateM0     State = 0x2
	StateM1     State = 0x3
	StateM2     State = 0x4
	StateM3     State = 0x5
	StateM3Fast State = 0x6
	StateBHI    State = 0x7
	StateSysErr State = 0xFF
)

var stateNames = map[State]string{
	StateReset: "RESET", StateReady: "READY", StateM0: "M0", StateM1: "M1",
	StateM2: "M2", StateM3: "M3", StateM3Fast: "M3_FAST", StateBHI: "BHI",
	StateSysErr: "SYS_ERR",
}

// String returns the state's name as Linux prints it.
func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("STATE(0x%x)", uint8(s))
}

// ExecEnv is an execution environment as carried in BHI EXECENV and EE events.
type ExecEnv uint8

// Execution environments.
const (
	EEPBL   ExecEnv = 0
	EESBL   ExecEnv = 1
	EEAMSS  ExecEnv = 2
	EERDDM  ExecEnv = 3
	EEWFW   ExecEnv = 4
	EEPTHRU ExecEnv = 5
	EEEDL   ExecEnv = 6
	EEFP    ExecEnv = 7
)

var eeNames = []string{"PBL", "SBL", "AMSS", "RDDM", "WFW", "PTHRU", "EDL", "FP"}

// String returns the execution environment's name.
func (e ExecEnv) String() string {
	if int(e) < len(eeNames) {
		return eeNames[e]
	}
	return fmt.Sprintf("EE(%d)", uint8(e))
}

// MissionMode reports whether e is a mission-mode environment (AMSS, WFW, FP).
func (e ExecEnv) MissionMode() bool { return e == EEAMSS || e == EEWFW || e == EEFP }

// InPBL reports whether e belongs to the boot-loader group (PBL, PTHRU, EDL).
func (e ExecEnv) InPBL() bool { return e == EEPBL || e == EEPTHRU || e == EEEDL }

// ChannelState is the state a channel context carries in chcfg[7:0].
type ChannelState uint8

// Channel states.
const (
	ChannelDisabled  ChannelState = 0
	ChannelEnabled   ChannelState = 1
	ChannelRunning   ChannelState = 2
	ChannelSuspended ChannelState = 3
	ChannelStop      ChannelState = 4
	ChannelError     ChannelState = 5
)

var chStateNames = []string{"DISABLED", "ENABLED", "RUNNING", "SUSPENDED", "STOP", "ERROR"}

// String returns the channel state's name.
func (s ChannelState) String() string {
	if int(s) < len(chStateNames) {
		return chStateNames[s]
	}
	return fmt.Sprintf("CHSTATE(%d)", uint8(s))
}
