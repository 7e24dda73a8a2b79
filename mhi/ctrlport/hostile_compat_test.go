package ctrlport_test

import (
	"errors"
	"time"

	"github.com/gomhi/gomhi/mhi/ctrlport"
)

// setChainTimeout sets the pair's chain timeout.
func setChainTimeout(o *ctrlport.PairOptions, d time.Duration) { o.ChainTimeout = d }

// configRefused: the session refused what the modem assigned.
func configRefused(err error) bool { return errors.Is(err, ctrlport.ErrBadSessionConfig) }

// mbimClientStats returns an MBIM client's counters.
func mbimClientStats(c *ctrlport.MBIMClient) any { return c.Stats() }

// badFragments returns an MBIM client's bad_fragments counter.
func badFragments(c *ctrlport.MBIMClient) uint64 { return c.Stats().BadFragments }
