//! SimGpu: a model of one non-preemptive GPU (being written).
