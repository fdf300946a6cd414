"""The archive formats `assemble package` writes and the sums file beside them, in a module of their
own: the CLI names them in its help, and the workflow writer reads them, without loading the packager."""

FORMATS = ("tar.zst", "tar.gz", "zip")
DEFAULT_FORMAT = "tar.zst"   # multi-threaded: a 2.3 GB runtime is a two-minute gzip (scripts/bench-compress.py)
WINDOWS_FORMAT = "zip"       # the one format of Windows runtimes (Explorer opens it; no symlinks to keep)
SUMS = "SHA256SUMS"
