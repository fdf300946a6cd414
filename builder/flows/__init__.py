"""The flows: each runs the stages of the packages below it in order, for one command, and
publishes what it made.

    build.py      recipe -> source -> toolchains -> units -> merge -> bundle -> manifest -> verify
    repair.py     prebuilt llama.cpp -> plan -> place -> verify, one platform of platforms/
    platforms/    linux.py and windows.py: repair's plan / show / place / verify
    publish.py    the output folder: --out checked first, staging beside it, verify, atomic swap, --keep
"""
