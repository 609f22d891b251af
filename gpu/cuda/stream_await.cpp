// stream_done and event_done: one heap-allocated hand-off per await, freed
// by the host function after it has posted the coroutine.
#include "gpu/cuda/stream_await.hpp"

#include <memory>

namespace troupe::gpu::cuda {

namespace {

struct hand_off {
  std::coroutine_handle<> h;
  resume_poster post;
};

void CUDART_CB on_host(void* p) {
  std::unique_ptr<hand_off> ho{static_cast<hand_off*>(p)};
  ho->post(ho->h);
}

// Queues the hand-off behind `stream`; false (resume now) if it cannot be.
bool queue_resume(cudaStream_t stream, std::coroutine_handle<> h, const resume_poster& post,
                  cudaError_t& error) {
  auto ho = std::make_unique<hand_off>(hand_off{h, post});
  error = cudaLaunchHostFunc(stream, on_host, ho.get());
  if (error != cudaSuccess)
    return false;
  ho.release(); // on_host owns it now
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
