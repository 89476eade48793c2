# The CUDA backend (issue 46), included by the top CMakeLists.txt.
#
#   -DLZ_CUDA=AUTO  (default) built when the CUDA toolkit is found: nvrtc,
#                   cudart, cuBLASLt and cuDNN; else a status line says why
#   -DLZ_CUDA=ON    configure fails without them
#   -DLZ_CUDA=OFF   never built
#
# What is built:
#   lazyc_cuda_plan  (static) the GPU-free half: a program's plan, the
#                    kernel sources generated from it and the family
#                    modules (kernels/*.cu, embedded), NVRTC and its disk
#                    cache. The tests below link it on machines without a GPU.
#   liblazyc_cuda.so the backend the registry loads (lz_device_use("cuda")),
#                    beside liblazyc. liblazyc itself never links CUDA
#                    (tests/cuda/test_cuda_registry.sh checks it with readelf).
#   tests/cuda/      GPU-free tests (ctest -L cuda), and with
#                    -DLZ_CUDA_GPU_TESTS=ON the GPU suite that
#                    scripts/device_check.sh runs on a machine with one.
#
# Kernels are CUDA C compiled by NVRTC at run time, never by nvcc at build
# time: the build needs the toolkit's headers and libraries only.
include(GNUInstallDirs)
set(LZ_CUDA AUTO CACHE STRING "build the CUDA backend liblazyc_cuda.so: AUTO (when the toolkit is found), ON, OFF")
set_property(CACHE LZ_CUDA PROPERTY STRINGS AUTO ON OFF)
option(LZ_CUDA_GPU_TESTS "register the CUDA tests that need a GPU (scripts/device_check.sh)" OFF)
set(LZ_HAVE_CUDA OFF)
if(NOT LZ_CUDA STREQUAL "OFF")
  if(CMAKE_VERSION VERSION_LESS 3.17)
    set(_lz_cuda_why "CMake ${CMAKE_VERSION} has no FindCUDAToolkit (3.17 or later)")
  else()
    find_package(CUDAToolkit QUIET)
    set(_lz_cuda_why "")
    if(NOT CUDAToolkit_FOUND)
      set(_lz_cuda_why "no CUDA toolkit found (nvcc on PATH or CUDAToolkit_ROOT)")
    else()
      foreach(t CUDA::cudart_static CUDA::cublasLt CUDA::nvrtc)
        if(NOT TARGET ${t})
          string(APPEND _lz_cuda_why " ${t} missing;")
        endif()
      endforeach()
      find_library(LZ_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64)
      find_path(LZ_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      if(NOT LZ_CUDNN_LIB OR NOT LZ_CUDNN_INCLUDE)
        string(APPEND _lz_cuda_why " cuDNN (libcudnn, cudnn.h) not found;")
      endif()
    endif()
  endif()
  if(_lz_cuda_why STREQUAL "")
    set(LZ_HAVE_CUDA ON)
    message(STATUS "lazyc: CUDA backend built (CUDA ${CUDAToolkit_VERSION}, cuDNN ${LZ_CUDNN_LIB})")
  elseif(LZ_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LZ_CUDA=ON but the CUDA backend cannot be built:${_lz_cuda_why}")
  else()
    message(STATUS "lazyc: CUDA backend not built (LZ_CUDA=AUTO):${_lz_cuda_why}")
  endif()
endif()

if(LZ_HAVE_CUDA)
  set(_cu ${CMAKE_SOURCE_DIR}/src/backends/cuda)
  # the embedded sources: every kernels/ file and base/rng.h (NVRTC's headers)
  file(GLOB _cu_kernel_files CONFIGURE_DEPENDS ${_cu}/kernels/*)
  set(_cu_names "")
  set(_cu_paths "")
  foreach(f ${_cu_kernel_files})
    get_filename_component(n ${f} NAME)
    list(APPEND _cu_names ${n})
    list(APPEND _cu_paths ${f})
  endforeach()
  list(APPEND _cu_names "base/rng.h")
  list(APPEND _cu_paths ${CMAKE_SOURCE_DIR}/src/base/rng.h)
  string(REPLACE ";" "\\;" _cu_names_arg "${_cu_names}")
  string(REPLACE ";" "\\;" _cu_paths_arg "${_cu_paths}")
  add_custom_command(
    OUTPUT ${CMAKE_BINARY_DIR}/cu_sources.c
    COMMAND ${CMAKE_COMMAND} -DOUT=${CMAKE_BINARY_DIR}/cu_sources.c "-DNAMES=${_cu_names_arg}"
            "-DPATHS=${_cu_paths_arg}" -P ${_cu}/embed.cmake
    DEPENDS ${_cu_paths} ${_cu}/embed.cmake
    COMMENT "Embedding the CUDA kernel sources")

  set(_cu_plan_sources ${_cu}/plan.c ${_cu}/planner.c ${_cu}/codegen.c ${_cu}/nvrtc_cache.c
      ${_cu}/f_shape.c ${_cu}/f_nn.c ${_cu}/f_reduce.c ${_cu}/f_softmax.c ${_cu}/f_norm.c
      ${_cu}/f_pool.c ${_cu}/f_matmul.c ${_cu}/f_conv.c ${_cu}/f_index.c ${CMAKE_BINARY_DIR}/cu_sources.c)
  add_library(lazyc_cuda_plan STATIC ${_cu_plan_sources})
  set_target_properties(lazyc_cuda_plan PROPERTIES POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden)
  target_include_directories(lazyc_cuda_plan PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(lazyc_cuda_plan PUBLIC CUDA::nvrtc m)

  # The backend: links nothing of liblazyc's (--no-undefined proves it);
  # the op table's names (base/op.c, the ground floor's, which needs
  # nothing) are compiled in, everything else comes in the host table.
  file(GLOB _cu_run_sources CONFIGURE_DEPENDS ${_cu}/cu_*.c)
  add_library(lazyc_cuda MODULE ${_cu_run_sources} ${CMAKE_SOURCE_DIR}/src/base/op.c)
  set_target_properties(lazyc_cuda PROPERTIES PREFIX "lib" OUTPUT_NAME lazyc_cuda C_VISIBILITY_PRESET hidden)
  target_include_directories(lazyc_cuda PRIVATE ${LZ_CUDNN_INCLUDE})
  target_link_libraries(lazyc_cuda PRIVATE lazyc_cuda_plan CUDA::cudart_static CUDA::cublasLt ${LZ_CUDNN_LIB}
                        Threads::Threads ${CMAKE_DL_LIBS})
  if(NOT LZ_SANITIZE)
    target_link_options(lazyc_cuda PRIVATE -Wl,--no-undefined)
  endif()
  # the toolkit's targets bring the driver library along; only what is used
  # is kept (Debian's gcc does so by default, clang does not), so nothing
  # needs libcuda.so.1 to load
  target_link_options(lazyc_cuda PRIVATE -Wl,--as-needed)
  install(TARGETS lazyc_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

  # GPU-free tests (ctest -L cuda): they choose their own backends, so no
  # _guarded twin.
  foreach(t test_cuda_codegen test_cuda_cache test_cuda_emulate)
    add_executable(${t} ${CMAKE_SOURCE_DIR}/tests/cuda/${t}.c ${CMAKE_SOURCE_DIR}/tests/testlib.c)
    target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests
                               ${CMAKE_SOURCE_DIR}/models)
    target_link_libraries(${t} PRIVATE lazyc_static lazyc_cuda_plan)
    target_link_options(${t} PRIVATE -Wl,--as-needed)
    # test_cuda_emulate: four models that reach every op the zoo has
    # (all ten: test_cuda_emulate all)
    set(_args "")
    if(t STREQUAL "test_cuda_emulate")
      set(_args "resnet18,BERT_pytorch,squeezenet1_1,timm_vision_transformer")
    endif()
    add_test(NAME ${t} COMMAND ${t} ${_args} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
    set_tests_properties(${t} PROPERTIES TIMEOUT 600 LABELS cuda)
  endforeach()

  # The GPU suite (tests/cuda/gpu_suite.c): built wherever the backend is,
  # so CI compiles it; registered only for a machine with a GPU.
  add_executable(gpu_suite ${CMAKE_SOURCE_DIR}/tests/cuda/gpu_suite.c ${CMAKE_SOURCE_DIR}/tests/testlib.c)
  target_include_directories(gpu_suite PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/models)
  target_link_libraries(gpu_suite PRIVATE lazyc_static CUDA::cudart)
  if(LZ_CUDA_GPU_TESTS)
    foreach(part ops capture launches replay memory oom)
      add_test(NAME test_cuda_gpu_${part}
               COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cuda/gpu_suite.sh $<TARGET_FILE:gpu_suite> ${part})
      set_tests_properties(test_cuda_gpu_${part} PROPERTIES TIMEOUT 600 LABELS cuda_gpu RUN_SERIAL ON)
    endforeach()
  endif()
endif()

# Without a GPU (and without the backend built): lz_device_use("cuda")
# fails with a message saying which, and liblazyc links no CUDA library.
add_test(NAME test_cuda_registry
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cuda/test_cuda_registry.sh ${CMAKE_BINARY_DIR}
                 $<BOOL:${LZ_HAVE_CUDA}>)
set_tests_properties(test_cuda_registry PROPERTIES TIMEOUT 120 LABELS cuda)
