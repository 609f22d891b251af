#include "runtime/logging.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace troupe {

std::optional<std::string> configure_logging(const logging_options& opts) {
  const auto level = spdlog::level::from_str(opts.level);
  if (level == spdlog::level::off && opts.level != "off")
    return "logging.level: unknown level \"" + opts.level + "\"";
  try {
    spdlog::drop("troupe");
    std::shared_ptr<spdlog::logger> logger;
    if (opts.file.empty())
      logger = spdlog::stderr_color_mt("troupe");
    else
      logger = spdlog::basic_logger_mt("troupe", opts.file);
    logger->set_level(level);
    // Warnings name what failed and why (a client's error reply points
    // here): on disk at once, not when a buffer fills or the process ends.
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(logger);
  } catch (const spdlog::spdlog_ex& e) {
    return std::string{"logging.file: "} + e.what();
  }
  return std::nullopt;
}

} // namespace troupe
