# Embeds the CUDA backend's kernel sources in C (cu_sources.c), so that
# liblazyc_cuda.so carries them for NVRTC and needs no file at run time:
#   cmake -DOUT=file.c -DNAMES="a;b" -DPATHS="/x/a;/x/b" -P embed.cmake
# Bytes, not a string literal: any character and any length pass.
set(text "/* Made by src/backends/cuda/embed.cmake from the files it names: do not edit. */\n")
string(APPEND text "#include \"backends/cuda/nvrtc_cache.h\"\n\n")
list(LENGTH NAMES n)
math(EXPR last "${n} - 1")
set(table "")
foreach(i RANGE ${last})
  list(GET NAMES ${i} name)
  list(GET PATHS ${i} path)
  file(READ "${path}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
  string(APPEND text "static const char src${i}[] = {\n${bytes}0};\n")
  string(APPEND table "    {\"${name}\", src${i}},\n")
endforeach()
string(APPEND text "\nconst lz_cu_source lz_cu_sources[] = {\n${table}};\n")
string(APPEND text "const int lz_cu_n_sources = ${n};\n")
file(WRITE "${OUT}.tmp" "${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
