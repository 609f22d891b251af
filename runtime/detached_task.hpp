// A fire-and-forget C++20 coroutine: starts at once, runs until its first
// co_await suspends it, and frees its frame when it returns. Whoever resumes
// it (an actor's message handler, on the actor's own thread) continues it
// there, so a transfer pipeline reads as straight-line code without blocking
// a thread. Used by the copy engine actor; CAF-free.
#pragma once

#include <coroutine>
#include <exception>

namespace troupe {

struct detached_task {
  struct promise_type {
    detached_task get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    /// A coroutine body that throws is a bug: stop loudly.
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

} // namespace troupe
