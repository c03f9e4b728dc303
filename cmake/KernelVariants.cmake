# Kernel variants: with DF_NATIVE=OFF on x86-64 the hot kernel translation units
# are compiled once per instruction set and the library picks one at run time
# (src/util/kernels.h, include/distflow/platform.h). They were chosen by profile
# (perf over bench/model_step, bench/lmhead, bench/rollout): attention, the
# elementwise / row ops, the vocabulary softmax statistics, the LM head, the
# optimizer step, decode attention and sampling.
#
# Sets DF_KERNEL_SOURCES (to remove from the baseline sources),
# DF_KERNEL_DISPATCH_SOURCES (the wrappers; baseline) and
# df_add_kernel_variants(<out_var>) to create one OBJECT library per variant and
# return their objects.

set(DF_KERNEL_SOURCES
  ${CMAKE_SOURCE_DIR}/src/model/ops_attention.c
  ${CMAKE_SOURCE_DIR}/src/model/ops_attention_vec.c
  ${CMAKE_SOURCE_DIR}/src/model/ops_basic.c
  ${CMAKE_SOURCE_DIR}/src/model/ops_vocab.c
  ${CMAKE_SOURCE_DIR}/src/model/ops_lmhead.c
  ${CMAKE_SOURCE_DIR}/src/model/optim_step.c
  ${CMAKE_SOURCE_DIR}/src/model/ops_kv.c
  ${CMAKE_SOURCE_DIR}/src/engine/sampling.c)
# AdamW's loop vectorizes only where sqrtf needs no errno (its arguments are >= 0 or NaN,
# which set none anyway); the results are the same bits (src/model/optim_step.c).
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/model/optim_step.c
  PROPERTIES COMPILE_OPTIONS -fno-math-errno)
set(DF_KERNEL_DISPATCH_SOURCES
  ${CMAKE_SOURCE_DIR}/src/model/kernels_dispatch.c
  ${CMAKE_SOURCE_DIR}/src/engine/kernels_dispatch.c)

# Each variant's flags enable exactly what src/util/kernels.c checks at run
# time: x86-64-v3 (with v2) for avx2, x86-64-v4 for avx512, spelled out rather
# than -march=x86-64-v3 so that older compilers take them too.
set(DF_KERNEL_VARIANTS generic avx2 avx512)
set(DF_KFLAGS_generic "")
set(DF_KFLAGS_avx2 -msse3 -mssse3 -msse4.1 -msse4.2 -mpopcnt -mavx -mavx2 -mfma -mf16c -mbmi
    -mbmi2 -mlzcnt -mmovbe)
set(DF_KFLAGS_avx512 ${DF_KFLAGS_avx2} -mavx512f -mavx512cd -mavx512bw -mavx512dq -mavx512vl)

function(df_add_kernel_variants out_var)
  set(objs "")
  foreach(v ${DF_KERNEL_VARIANTS})
    string(TOUPPER ${v} V)
    add_library(distflow_k_${v} OBJECT ${DF_KERNEL_SOURCES})
    set_target_properties(distflow_k_${v} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_include_directories(distflow_k_${v}
      PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
    target_compile_options(distflow_k_${v} PRIVATE ${DF_WARN} ${DF_KFLAGS_${v}} -fvisibility=hidden)
    target_compile_definitions(distflow_k_${v}
      PRIVATE _GNU_SOURCE DF_KVARIANT=${v} DF_KVARIANT_${V}=1)
    target_link_libraries(distflow_k_${v} PRIVATE OpenMP::OpenMP_C)
    list(APPEND objs $<TARGET_OBJECTS:distflow_k_${v}>)
  endforeach()
  set(${out_var} ${objs} PARENT_SCOPE)
endfunction()
