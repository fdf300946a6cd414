# Run as `cmake -P` by builder.toolchain.detect.cmake: which binary really runs (PyPI's bin/cmake is a
# Python script that starts another file) and where its modules are. One line on stderr.
message("assemble-cmake|${CMAKE_VERSION}|${CMAKE_COMMAND}|${CMAKE_ROOT}")
