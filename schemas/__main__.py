"""`python -m gymbus.schemas` rewrites the exported JSON Schemas in `schemas/json/`."""

from ._export import write_schemas

for path in write_schemas():
    print(path.name)
