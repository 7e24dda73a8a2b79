package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/gomhi/gomhi/sysfs"
)

// attrSize is the size every attribute file reports, as sysfs does. Reads
// return the real (shorter) value; FOPEN_DIRECT_IO makes the kernel ask.
const attrSize = 4096

// dirNode serves a sysfs.Dir. Its children are not cached: Lookup and
// Readdir consult the tree each time, so devices added or removed while
// mounted show up at once.
type dirNode struct {
	fs.Inode
	srv  *Server
	dir  *sysfs.Dir
	path string // slash-separated path below the mount, "" for the root
}

var (
	_ fs.NodeLookuper  = (*dirNode)(nil)
	_ fs.NodeReaddirer = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeSetattrer = (*dirNode)(nil)
	_ fs.NodeStatfser  = (*dirNode)(nil)
	_ fs.NodeOpendirer = (*dirNode)(nil)
)

func (n *dirNode) child(name string) string {
	if n.path == "" {
		return name
	}
	return n.path + "/" + name
}

// Lookup resolves name against the tree as it is now.
func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if d, ok := n.dir.Dir(name); ok {
		c := &dirNode{srv: n.srv, dir: d, path: n.child(name)}
		c.fill(&out.Attr)
		return n.NewInode(ctx, c, fs.StableAttr{Mode: fuse.S_IFDIR, Ino: n.srv.inos.dir(d)}), 0
	}
	if a, ok := n.dir.Attr(name); ok {
		c := &attrNode{srv: n.srv, attr: a, path: n.child(name)}
		c.fill(&out.Attr)
		return n.NewInode(ctx, c, fs.StableAttr{Mode: fuse.S_IFREG, Ino: n.srv.inos.attr(a)}), 0
	}
	return nil, syscall.ENOENT
}

// Readdir lists the subdirectories, then the attributes, as they are now.
func (n *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	dirs, attrs := n.dir.Dirs(), n.dir.Attrs()
	ents := make([]fuse.DirEntry, 0, len(dirs)+len(attrs))
	for _, d := range dirs {
		ents = append(ents, fuse.DirEntry{Name: d.Name, Mode: fuse.S_IFDIR, Ino: n.srv.inos.dir(d)})
	}
	for _, a := range attrs {
		ents = append(ents, fuse.DirEntry{Name: a.Name, Mode: fuse.S_IFREG, Ino: n.srv.inos.attr(a)})
	}
	return fs.NewListDirStream(ents), 0
}

// Opendir allows listing; directories are always readable.
func (n *dirNode) Opendir(ctx context.Context) syscall.Errno { return 0 }

// Getattr reports 0755, nlink 2 + subdirectories, the mount time.
func (n *dirNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fill(&out.Attr)
	return 0
}

func (n *dirNode) fill(a *fuse.Attr) {
	a.Mode = fuse.S_IFDIR | 0o755
	a.Nlink = uint32(2 + len(n.dir.Dirs()))
	a.Size = 0
	n.srv.times(a)
}

// Setattr refuses every change (chmod, chown, utimes…) with EPERM.
func (n *dirNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EPERM
}

// The tree's shape belongs to the tree: every namespace change is EPERM,
// as in sysfs. (Without these go-fuse would let unlink and rmdir succeed
// silently.)

// Mkdir is refused with EPERM.
func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Mknod is refused with EPERM.
func (n *dirNode) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Create is refused with EPERM (O_CREAT of an existing attribute is an
// ordinary open and never gets here).
func (n *dirNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EPERM
}

// Symlink is refused with EPERM.
func (n *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Link is refused with EPERM.
func (n *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Unlink is refused with EPERM.
func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

// Rmdir is refused with EPERM.
func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

// Rename is refused with EPERM.
func (n *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EPERM
}

// Statfs reports an empty file system, as sysfs does.
func (n *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	*out = fuse.StatfsOut{Bsize: attrSize, Frsize: attrSize, NameLen: 255}
	return 0
}

// attrNode serves one sysfs.Attr as a file.
type attrNode struct {
	fs.Inode
	srv  *Server
	attr *sysfs.Attr
	path string
}

var (
	_ fs.NodeOpener    = (*attrNode)(nil)
	_ fs.NodeReader    = (*attrNode)(nil)
	_ fs.NodeWriter    = (*attrNode)(nil)
	_ fs.NodeGetattrer = (*attrNode)(nil)
	_ fs.NodeSetattrer = (*attrNode)(nil)
)

func (n *attrNode) fill(a *fuse.Attr) {
	a.Mode = fuse.S_IFREG | uint32(n.attr.Mode.Perm())
	a.Nlink = 1
	a.Size = attrSize
	n.srv.times(a)
}

// Getattr reports the attribute's mode and size 4096.
func (n *attrNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fill(&out.Attr)
	return 0
}

// Setattr accepts truncation to 0 (the O_TRUNC of `echo v > attr`) on a
// writable attribute and does nothing; any other change is EPERM.
func (n *attrNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	const harmless = fuse.FATTR_FH | fuse.FATTR_LOCKOWNER | fuse.FATTR_CTIME | fuse.FATTR_KILL_SUIDGID
	size, hasSize := in.GetSize()
	if in.Valid&^(harmless|fuse.FATTR_SIZE) != 0 || (hasSize && size != 0) {
		return syscall.EPERM
	}
	if hasSize && !n.attr.Writable() {
		return syscall.EACCES
	}
	n.fill(&out.Attr)
	return 0
}

// Open refuses to open a read-only attribute for writing or a write-only
// one for reading (EACCES). The kernel checks the mode bits
// (default_permissions) for other users, but root passes them, so the
// check is repeated here; and a write open by anyone but root (or a
// holder of CAP_DAC_OVERRIDE) is refused with EACCES and logged, whatever
// the kernel decided (see mayWrite). Open makes every open DIRECT_IO so
// reads see the live value and each write(2) reaches Write.
func (n *attrNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	acc := flags & syscall.O_ACCMODE
	wantR := acc == syscall.O_RDONLY || acc == syscall.O_RDWR
	wantW := acc == syscall.O_WRONLY || acc == syscall.O_RDWR || flags&syscall.O_TRUNC != 0
	if (wantR && !n.attr.Readable()) || (wantW && !n.attr.Writable()) {
		return nil, 0, syscall.EACCES
	}
	if wantW {
		if ok, uid, pid := mayWrite(ctx); !ok {
			n.srv.log.Info("fusefs: write open refused: only root may change attributes", "path", n.path, "uid", uid, "pid", pid)
			return nil, 0, syscall.EACCES
		}
	}
	return &handle{}, fuse.FOPEN_DIRECT_IO, 0
}

// handle is one open file. Like seq_file in sysfs, it takes a snapshot of
// the value on a read at offset 0 and serves later offsets from it, so a
// reader that reads in pieces sees one consistent value.
type handle struct {
	mu   sync.Mutex
	data []byte
	ok   bool
}

// Read returns the value plus a newline. Each read at offset 0 reads the
// attribute again.
func (n *attrNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, _ := f.(*handle)
	if h == nil {
		h = &handle{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 || !h.ok {
		v, err := n.attr.Read()
		if err != nil {
			n.srv.log.Debug("fusefs: read failed", "path", n.path, "err", err)
			return nil, Errno(err)
		}
		h.data, h.ok = append([]byte(v), '\n'), true
	}
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(h.data)))
	return fuse.ReadResultData(h.data[off:end]), 0
}

// Write applies the whole buffer as the value (surrounding white space,
// such as echo's newline, is ignored by the tree) regardless of offset, as
// each write(2) to a sysfs attribute is one store.
func (n *attrNode) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if err := n.attr.Write(string(data)); err != nil {
		n.srv.log.Info("fusefs: write rejected", "path", n.path, "value", string(data), "err", err)
		return 0, Errno(err)
	}
	n.srv.log.Debug("fusefs: write", "path", n.path, "value", string(data))
	return uint32(len(data)), 0
}
