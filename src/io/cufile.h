// GPUDirect Storage through libcufile, loaded at run time (issue #6: "optional GPUDirect Storage
// when the platform supports it, falling back cleanly"). There is no link-time dependency: builds
// and machines without libcufile see `available == false` with the reason, and the device loader
// keeps its pinned staging ring (io/device_loader.h).
//
// The library is taken from H3_CUFILE_LIBRARY when set (a path or a soname; tests point it at a
// missing file), else libcufile.so.0, else libcufile.so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/device_loader.h"

namespace h3::io {

struct CufileInfo {
  bool available = false;  // library loaded, entry points resolved, driver opened
  bool compat = true;      // compatibility mode (POSIX reads + host bounce), not real GDS
  std::string library;     // what was (tried to be) loaded
  std::string reason;      // why it is unavailable, or a short description when available
};

// Loads the library and opens the driver once per process and library choice (thread-safe;
// later calls return the first answer). Makes `device` current for the driver's CUDA context.
// Never throws.
const CufileInfo& cufile_probe(int device);

// True when the nvidia-fs kernel driver is loaded (/proc/driver/nvidia-fs): the precondition of
// real GDS, checked before anything is loaded so that the default (auto) mode costs nothing on
// machines without it.
bool nvidia_fs_present();

// Reads every span of the file at `path` straight into device memory on `device` (span.dst are
// device pointers) with cuFileRead, `threads` reads in flight. Synchronizes the default stream
// first (the destinations come from the stream-ordered pool, core/device.h). Any failure (open,
// registration, a read error or short read) throws kUnsupported with the reason: the caller
// falls back to the staging ring, which re-reads the file and reports real I/O errors itself.
// Returns the bytes read.
uint64_t cufile_read_spans(const std::string& path, std::vector<ByteSpan> spans, int device,
                           int threads);

}  // namespace h3::io
