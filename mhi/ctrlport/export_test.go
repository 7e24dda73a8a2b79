package ctrlport

import "github.com/gomhi/gomhi/mhi/proto/qmi"

// ParseWDSSettings exposes parseWDSSettings to the fuzz target.
func ParseWDSSettings(t []byte, family uint8, cfg *SessionConfig) error {
	return parseWDSSettings(qmi.TLVs(t), family, cfg)
}
