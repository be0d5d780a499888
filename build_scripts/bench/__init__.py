"""`make bench`: depthwise convolution timed four ways on real model layers.

  layers     the layer sets and the problems run on each (plain data)
  floor      bytes each pass must move, and the floor time they give
  variants   the implementations: stock torch, cuDNN forced, upstream's native kernel
             forced, ours (the overlay's kernels), and routed (the overlay's automatic choice)
  timing     CUDA-event medians of CUDA-graph replays over rotating buffers, copy bandwidth
  run        the GPU run: correctness against float64, then timings, into a JSON report
  report     the report as markdown tables and PNG plots (runs anywhere)

layers, floor and report need only the standard library (report's plots need matplotlib);
the rest needs torch 2.11.0 with a GPU and the staged overlay.
"""
