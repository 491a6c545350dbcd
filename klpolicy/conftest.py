"""Doctest configuration: doctests of optional submodules run only when their extra is installed."""

import importlib.util

collect_ignore_glob = []
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob.append("torch/*")
if importlib.util.find_spec("matplotlib") is None:
    collect_ignore_glob += ["plotting/*", "app/demo.py"]
if importlib.util.find_spec("hypothesis") is None:
    collect_ignore_glob.append("testing/*")
