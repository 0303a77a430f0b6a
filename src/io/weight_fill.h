// Benchmark weights: a process-wide hook that replaces every tensor a loader reads with values
// made where the tensor lives (h3 bench e2e --random-weights). A released-shape repository
// (`h3 make-tiny --released-shapes`) has exact headers over sparse files that read as zeros; the
// engine runs it at full size, but zero weights make degenerate activations (top-k ties, no
// denormals, idle clocks) that time differently from a real model. The loaders still read every
// byte, so load timings stay real; the hook then overwrites the tensor.
//
// The io layer only calls the hook; what values it writes is the installer's business
// (pipeline/random_weights.h fills on the device with ops::fill_random).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::io {

class WeightFill {
 public:
  virtual ~WeightFill() = default;
  // Overwrites `t` (contiguous, owned, on any device) in place. `name` is the tensor's name in
  // its checkpoint; `source` the checkpoint (folder or file) it comes from.
  virtual void fill(const std::string& source, const std::string& name, Tensor& t) const = 0;
  // The tensors of one load (same device, each as fill() takes it), by default one fill() each.
  // An installer that fills many tensors in one pass overrides it: a component of hundreds of
  // small tensors would otherwise pay one kernel launch each inside its load's time.
  virtual void fill_many(const std::string& source, const std::vector<std::string>& names,
                         std::vector<Tensor>& ts) const {
    for (size_t i = 0; i < ts.size(); ++i) fill(source, names[i], ts[i]);
  }
};

// Installs the hook for every later load (nullptr removes it). Not for concurrent loads.
void set_weight_fill(std::shared_ptr<const WeightFill> fill);
const WeightFill* weight_fill();

// Applies the installed hook to a freshly loaded tensor: a borrowed view (the mmap of a CPU load)
// becomes an owned copy first, so that the file's mapping is never written. Float tensors only;
// others come back unchanged. Without a hook, returns `t` as it is.
Tensor apply_weight_fill(const std::string& source, const std::string& name, Tensor t);
// The same for the tensors of one load, `names[i]` naming `ts[i]`, through one fill_many call.
void apply_weight_fill(const std::string& source, const std::vector<std::string>& names,
                       std::vector<Tensor>& ts);

}  // namespace h3::io
