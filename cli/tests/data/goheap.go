// Writes two Go heap profiles (runtime/pprof, every allocation recorded) of a program whose
// memory moves between them: `goheap BEFORE.pb.gz AFTER.pb.gz`. Between the two, growLeak keeps
// 6 MiB more, shrinkCache drops half of its 2 MiB and steady allocates nothing new, so a diff of
// AFTER against BEFORE has growLeak first, shrinkCache negative and steady nowhere.
package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

var leak [][]byte
var cache [][]byte
var kept [][]byte

//go:noinline
func growLeak(n int) {
	for i := 0; i < n; i++ {
		leak = append(leak, make([]byte, 64<<10))
	}
}

//go:noinline
func fillCache(n int) {
	for i := 0; i < n; i++ {
		cache = append(cache, make([]byte, 32<<10))
	}
}

//go:noinline
func shrinkCache() {
	half := len(cache) / 2
	for i := half; i < len(cache); i++ {
		cache[i] = nil
	}
	cache = cache[:half]
}

//go:noinline
func steady() {
	for i := 0; i < 24; i++ {
		kept = append(kept, make([]byte, 16<<10))
	}
}

func write(path string) {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		panic(err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		panic(err)
	}
	if err := f.Close(); err != nil {
		panic(err)
	}
}

func main() {
	runtime.MemProfileRate = 1
	steady()
	growLeak(32)
	fillCache(64)
	write(os.Args[1])
	growLeak(96)
	shrinkCache()
	write(os.Args[2])
	runtime.KeepAlive(leak)
	runtime.KeepAlive(cache)
	runtime.KeepAlive(kept)
}
