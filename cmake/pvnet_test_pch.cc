// The carrier of the tests' precompiled header (cmake/pvnet_test.cmake): the header is
// built for this empty translation unit and reused by every test executable.
