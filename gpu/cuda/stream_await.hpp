// Awaiting GPU work from a C++20 coroutine without blocking a thread: the
// coroutine suspends, cudaLaunchHostFunc queues a host function behind the
// awaited work, and that function (on a CUDA driver thread) hands the
// coroutine to `post`, which schedules its resumption on the owner's thread
// (an actor's message to itself, an io_context post). The host function
// calls no CUDA API, as the runtime requires.
//
// If the CUDA context fails for good the host function never runs (CUDA
// skips them after a sticky error); the backend treats such an error as the
// end of the device, so nothing waits on it in practice.
#pragma once

#include <cuda_runtime_api.h>

#include <coroutine>
#include <functional>

namespace troupe::gpu::cuda {

/// Schedules a suspended coroutine's resumption on its owner's thread.
using resume_poster = std::function<void(std::coroutine_handle<>)>;

/// co_await stream_done{stream, post}: resumes once everything enqueued on
/// `stream` before the co_await has run. Yields the error that kept it from
/// being queued (cudaSuccess normally); on such an error it resumes at once.
struct stream_done {
  cudaStream_t stream = nullptr;
  resume_poster post;
  cudaError_t error = cudaSuccess;

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h);
  cudaError_t await_resume() const noexcept { return error; }
};

/// co_await event_done{event, notify, post}: resumes once `event` (recorded
/// on any stream) has completed. `notify` is a stream of the awaiting
/// side's own that only waits: the awaited stream is never held up.
struct event_done {
  cudaEvent_t event = nullptr;
  cudaStream_t notify = nullptr;
  resume_poster post;
  cudaError_t error = cudaSuccess;

  bool await_ready() const noexcept { return cudaEventQuery(event) == cudaSuccess; }
  bool await_suspend(std::coroutine_handle<> h);
  cudaError_t await_resume() const noexcept { return error; }
};

} // namespace troupe::gpu::cuda
