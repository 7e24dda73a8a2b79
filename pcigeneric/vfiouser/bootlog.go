package vfiouser

import (
	"fmt"
	"log/slog"

	"github.com/gomhi/gomhi/mhi/ep"
)

// BootImageLogger returns an ep.BootConfig.OnImage that logs every image
// the mock modem's boot ROM receives as one "bhi_image" event with its
// stage (sbl, amss, edl), size in bytes and SHA-256 (hex), and the error
// when it was refused: with 'mhictl modem serve --json-log', one JSON
// object per image.
func BootImageLogger(log *slog.Logger) func(ep.BootImage) {
	return func(im ep.BootImage) {
		args := []any{"stage", im.Stage, "bytes", im.Bytes, "sha256", fmt.Sprintf("%x", im.SHA256)}
		if im.Err != nil {
			log.Warn("bhi_image", append(args, "accepted", false, "error", im.Err.Error())...)
			return
		}
		log.Info("bhi_image", append(args, "accepted", true)...)
	}
}
