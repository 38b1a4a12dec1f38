"""The `kernelpro` command line, one module per subcommand (explain, warmup, cache, profile,
bench, report, demo) and `main`, the argparse root.

Owns: argument parsing and printing. Must not: hold logic the library lacks, or be imported by
any package below it (tests/cli/test_layers.py checks that the library imports neither this
package nor argparse).
"""
