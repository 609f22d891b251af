// Awaiting GPU work from a C++20 coroutine without blocking a thread: the
// coroutine suspends, cudaStreamAddCallback queues a callback behind the
// awaited work, and the callback (on a CUDA driver thread) hands the
// coroutine to `post`, which schedules its resumption on the owner's thread
// (an actor's message to itself, an io_context post). The callback calls no
// CUDA API, as the runtime requires.
//
// The coroutine resumes exactly once: the callback runs also after the
// awaited work failed, even with a sticky error (cudaLaunchHostFunc's
// function would not run then), and the awaiter yields that error. `post`
// must not resume the coroutine inline; it runs on the driver's thread.
#pragma once

#include <cuda_runtime_api.h>

#include <coroutine>
#include <functional>

namespace troupe::gpu::cuda {

/// Schedules a suspended coroutine's resumption on its owner's thread.
using resume_poster = std::function<void(std::coroutine_handle<>)>;

/// co_await stream_done{stream, post}: resumes once everything enqueued on
/// `stream` before the co_await has run. Yields cudaSuccess, the error that
/// work ended with, or the error that kept the wait from being queued (then
/// it resumes at once, on the awaiting thread).
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
