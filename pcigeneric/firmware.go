package pcigeneric

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomhi/gomhi/mhi"
	"github.com/gomhi/gomhi/mhi/wire"
)

// ErrNoFirmware: the model names no image for the execution environment
// the modem waits in.
var ErrNoFirmware = errors.New("pcigeneric: no firmware image for this model")

// MaxFirmwareSize bounds an image read from the firmware directory.
const MaxFirmwareSize = 256 << 20

// FirmwareFromDir returns the host's firmware for model info with its
// images read from dir, under the names Linux's table gives them: the
// model's Firmware (fw, e.g. qcom/sdx55m/sbl1.mbn) for a modem in PBL, its
// EDLImage (edl) for one in EDL. An image is read when the modem asks for
// it. dir "" returns nil (no firmware: a modem in PBL is refused).
func FirmwareFromDir(info *ModemInfo, dir string) *mhi.Firmware {
	if dir == "" {
		return nil
	}
	return &mhi.Firmware{Load: func(ee wire.ExecEnv) (string, []byte, error) {
		name := info.Firmware
		if ee == wire.EEEDL {
			name = info.EDLImage
		}
		if name == "" {
			return "", nil, fmt.Errorf("%w: %s has no image for EE %s", ErrNoFirmware, info.Name, ee)
		}
		path := filepath.Join(dir, filepath.FromSlash(name))
		fi, err := os.Stat(path)
		if err != nil {
			return name, nil, err
		}
		if !fi.Mode().IsRegular() || fi.Size() == 0 || fi.Size() > MaxFirmwareSize {
			return name, nil, fmt.Errorf("%s: %d bytes, want a regular file of 1..%d bytes", path, fi.Size(), MaxFirmwareSize)
		}
		b, err := os.ReadFile(path)
		return name, b, err
	}}
}
