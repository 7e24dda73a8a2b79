package fusefs

import (
	"runtime"
	"sync"
	"weak"

	"github.com/gomhi/gomhi/sysfs"
)

// rootIno is the inode number of the mount's root (FUSE_ROOT_ID).
const rootIno = 1

// inodes hands out stable inode numbers: the same *sysfs.Dir or
// *sysfs.Attr always gets the same number, so repeated lookups of a name
// resolve to one kernel inode (find and du rely on it), while a device
// removed and added again gets fresh numbers. Entries are keyed by weak
// pointers and dropped once the tree object is garbage, so adding and
// removing devices does not grow the table.
type inodes struct {
	mu   sync.Mutex
	next uint64
	m    map[any]uint64 // weak.Pointer[sysfs.Dir] or weak.Pointer[sysfs.Attr]
}

func newInodes() *inodes {
	return &inodes{next: rootIno + 1, m: make(map[any]uint64)}
}

func (in *inodes) dir(d *sysfs.Dir) uint64   { return lookupIno(in, d) }
func (in *inodes) attr(a *sysfs.Attr) uint64 { return lookupIno(in, a) }

func lookupIno[T any](in *inodes, p *T) uint64 {
	key := weak.Make(p)
	in.mu.Lock()
	defer in.mu.Unlock()
	if ino, ok := in.m[key]; ok {
		return ino
	}
	ino := in.next
	in.next++
	in.m[key] = ino
	runtime.AddCleanup(p, func(k weak.Pointer[T]) {
		in.mu.Lock()
		delete(in.m, k)
		in.mu.Unlock()
	}, key)
	return ino
}
