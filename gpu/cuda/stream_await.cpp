// stream_done and event_done: one heap-allocated hand-off per await, freed
// by the stream callback after it has posted the coroutine.
#include "gpu/cuda/stream_await.hpp"

#include <memory>

namespace troupe::gpu::cuda {

namespace {

struct hand_off {
  std::coroutine_handle<> h;
  resume_poster post;
  cudaError_t* error; // the awaiter's, alive while the coroutine is suspended
};

// Runs exactly once, also after a device error (then with that error),
// unlike cudaLaunchHostFunc's function, which CUDA skips once the context
// has failed: the coroutine would never resume. Calls no CUDA API.
void CUDART_CB on_done(cudaStream_t, cudaError_t status, void* p) {
  std::unique_ptr<hand_off> ho{static_cast<hand_off*>(p)};
  *ho->error = status; // before the post: the owner reads it on resumption
  ho->post(ho->h);
}

// Queues the hand-off behind `stream`; false (resume now) if it cannot be.
// Once queued, the awaiter is not touched here again: the owner may have
// resumed the coroutine, and freed the awaiter, by the time this returns.
bool queue_resume(cudaStream_t stream, std::coroutine_handle<> h, const resume_poster& post,
                  cudaError_t& error) {
  auto ho = std::make_unique<hand_off>(hand_off{h, post, &error});
  const auto queued = cudaStreamAddCallback(stream, on_done, ho.get(), 0);
  if (queued != cudaSuccess) {
    error = queued;
    return false;
  }
  ho.release(); // on_done owns it now
  return true;
}

} // namespace

bool stream_done::await_suspend(std::coroutine_handle<> h) {
  return queue_resume(stream, h, post, error);
}

bool event_done::await_suspend(std::coroutine_handle<> h) {
  error = cudaStreamWaitEvent(notify, event, 0);
  if (error != cudaSuccess)
    return false;
  return queue_resume(notify, h, post, error);
}

} // namespace troupe::gpu::cuda
