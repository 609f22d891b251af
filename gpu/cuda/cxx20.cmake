# CUDA code is C++20 like the rest, but CMake 3.25 does not know nvcc's flag
# for it (nvcc 12 and later take -std=c++20). Included where CUDA is
# enabled: the top-level build (for every directory, tests/ included) and
# gpu/cuda's stand-alone build.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
