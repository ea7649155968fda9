//! Benchmark harnesses. The transport benchmark lives in the `fairgpu`
//! binary (`fairgpu bench transport`) because it needs the host and guest
//! roles as separate processes; criterion micro-benchmarks and the fairness
//! experiment harness will live here.
