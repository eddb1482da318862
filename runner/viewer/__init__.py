"""`gym-runner view`: browse rollouts in a web page, or write it as one HTML file.

`_index` indexes a rollouts file by byte offsets, `_rows` summarizes one row, `_app` serves
the page (`page/`) and its JSON, `_html` writes the self-contained file, `_view` starts
either, `_command` is the CLI.
"""
