"""kzcore's benchmarks: each bench is a module here with a ``main(argv) -> int`` that prints JSON (and writes
``--out``), declared in `bench.registry` and run through one entry point, ``python -m bench`` (`bench.__main__`).
Results go to bench/results/, indexed in bench/results/INDEX.md (`bench.index`). Importing the package imports
nothing else: a bench's heavy imports (torch, triton) happen only when it runs."""
