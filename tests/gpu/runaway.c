// Through fairgpu: "eater" launches a kernel that never ends and reports
// what the synchronize and the next call return; "tiny" times short
// kernels (is the GPU free again?).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;
static CUresult (*cuInit)(unsigned); static CUresult (*cuDeviceGet)(CUdevice*, int);
static CUresult (*cuCtxCreate)(CUcontext*, unsigned, CUdevice); static CUresult (*cuCtxSynchronize)(void);
static CUresult (*cuModuleLoadData)(CUmodule*, const void*); static CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
static CUresult (*cuMemAlloc)(CUdeviceptr*, size_t); static CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
static const char *PTX =
".version 7.5\n.target sm_75\n.address_size 64\n"
".visible .entry spin(.param .u64 flag) {\n .reg .u64 %rd<3>; .reg .b32 %r<2>; .reg .pred %p<2>;\n"
" ld.param.u64 %rd1, [flag]; cvta.to.global.u64 %rd2, %rd1;\nL1:\n ld.volatile.global.u32 %r1, [%rd2];\n setp.eq.u32 %p1, %r1, 0;\n @%p1 bra L1;\n ret;\n}\n"
".visible .entry tiny(.param .u64 out) {\n .reg .u64 %rd<3>; .reg .b32 %r<2>;\n"
" ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd2, %rd1; mov.u32 %r1, 1; st.global.u32 [%rd2], %r1; ret;\n}\n";
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){ setvbuf(stdout,0,_IONBF,0);
 void*h=dlopen("libcuda.so.1",RTLD_NOW); if(!h){puts("no libcuda");return 1;}
#define L(n,s) *(void**)&n=dlsym(h,s)
 L(cuInit,"cuInit");L(cuDeviceGet,"cuDeviceGet");L(cuCtxCreate,"cuCtxCreate_v2");L(cuCtxSynchronize,"cuCtxSynchronize");
 L(cuModuleLoadData,"cuModuleLoadData");L(cuModuleGetFunction,"cuModuleGetFunction");L(cuMemAlloc,"cuMemAlloc_v2");
 L(cuMemsetD32,"cuMemsetD32_v2");L(cuLaunchKernel,"cuLaunchKernel");
 CUdevice d; CUcontext c; CUmodule m; CUfunction spin,tiny; CUdeviceptr buf;
 int r = cuInit(0) | cuDeviceGet(&d,0) | cuCtxCreate(&c,0,d) | cuModuleLoadData(&m,PTX)
       | cuModuleGetFunction(&spin,m,"spin") | cuModuleGetFunction(&tiny,m,"tiny") | cuMemAlloc(&buf,64) | cuMemsetD32(buf,0,16);
 if (r) { printf("setup failed: %d\n", r); return 1; }
 void*a[]={&buf};
 if (argc>1 && argv[1][0]=='e') {
   r = cuLaunchKernel(spin,132,1,1,128,1,1,0,0,a,0); printf("eater launch -> %d\n", r);
   double t=now(); r = cuCtxSynchronize(); printf("eater synchronize -> %d after %.0f ms\n", r, (now()-t)*1e3);
   CUdeviceptr p; r = cuMemAlloc(&p,16); printf("next call (cuMemAlloc) -> %d\n", r);
   return 0;
 }
 int n=500; double lat[500];
 for(int i=0;i<n;i++){ double t=now(); r = cuLaunchKernel(tiny,1,1,1,32,1,1,0,0,a,0) | cuCtxSynchronize(); lat[i]=now()-t; if(r){printf("tiny failed %d\n",r);return 1;} }
 qsort(lat,n,sizeof(double),cmp); printf("tiny kernels through fairgpu: p50 %.1f us p99 %.1f us\n", lat[n/2]*1e6, lat[n*99/100]*1e6);
 return 0; }
