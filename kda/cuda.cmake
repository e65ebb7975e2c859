# kda_enable_cuda(): turns CUDA on for the calling directory when a CUDA compiler exists, and sets
# KDA_CUDA_FOUND. Shared by kernels/cuda and gpu. One architecture, sm_90a (mma.sync TF32 needs
# sm_80+; the harness targets the H200). A macro, so the directory properties and variables it sets
# belong to the caller.
macro(kda_enable_cuda)
  include(CheckLanguage)
  check_language(CUDA)
  set(KDA_CUDA_FOUND FALSE)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    enable_language(CUDA)
    # The project's warning flags are host-compiler flags: pass them to nvcc through -Xcompiler.
    get_directory_property(kda_inherited_options COMPILE_OPTIONS)
    set(kda_host_only_options)
    foreach(option IN LISTS kda_inherited_options)
      list(APPEND kda_host_only_options "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${option}>")
    endforeach()
    set_directory_properties(PROPERTIES COMPILE_OPTIONS "${kda_host_only_options}")
    # CUDA sources follow the project's C++20; CMake 3.25 does not know nvcc 13's flag for it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(KDA_CUDA_FOUND TRUE)
  endif()
endmacro()
