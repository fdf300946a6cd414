"""Helpers the scripts and the tests share: real vendor libraries (vendorlibs), a Redis server and
two "machines" for the remote compile cache (remotecache). They import builder, never tests/."""
