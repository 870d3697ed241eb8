"""The readers of a kernel tree, below every stage: the C++/CUDA parser, the CMake File API
model, setup.py record mode and the tree model built from them. Every stage may import this
package; it imports no stage."""
