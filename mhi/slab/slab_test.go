package slab

import "testing"

func TestSlabAllocator(t *testing.T) {
	s := NewOn(0x1000, make([]byte, 1<<16))
	a, err := s.Alloc(100, 4096)
	if err != nil || a.IOVA%4096 != 0 || len(a.Bytes) != 100 {
		t.Fatalf("%+v %v", a, err)
	}
	b, err := s.Alloc(1<<15, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(1<<16, 0); err == nil {
		t.Fatal("overcommit allowed")
	}
	if err := s.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Free(a); err == nil {
		t.Fatal("double free allowed")
	}
	if err := s.Free(b); err != nil {
		t.Fatal(err)
	}
	if len(s.free) != 1 || s.free[0].size != 1<<16 {
		t.Fatalf("free list not coalesced: %+v", s.free)
	}
	if _, err := s.Alloc(8, 3); err == nil {
		t.Fatal("alignment 3 allowed")
	}
}
