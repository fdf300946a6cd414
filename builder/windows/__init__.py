"""Windows runtimes: DLL folders assembled from prebuilt release zips, checked with a PE reader.

The Windows loader has no RPATH: it looks for a DLL in the executable's own folder first, so a
runtime is one flat folder of .exe and .dll files plus manifest.json (runtime-<name>-windows-x64/).
"""

PLATFORM = "windows"
ARCH = "x64"
FOLDER_SUFFIX = f"-{PLATFORM}-{ARCH}"      # runtime-<name>-windows-x64, <stem>-windows-x64.zip
