//! CudaExecutor: a real NVIDIA GPU through cudarc (being written).
