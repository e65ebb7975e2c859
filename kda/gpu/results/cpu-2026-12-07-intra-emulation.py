# kda/gpu/results/cpu-2026-12-07-intra-emulation.py — chunk_intra v6a and v6b in fp32 numpy on one chunk
# against fp64: the per-block-reference A (whole_chunk_a) at slow, fast and steep gates, and the
# block-row inverse as products. Prints (largest reach, |A − A64| max, |A_qk − A_qk64| max, inverse
# max error relative). 3×TF32 is taken as fp32. Run: python3 (with numpy) THIS_FILE
import numpy as np
rng=np.random.default_rng(1)
C,K=64,128
def run(gscale, slow=False):
    k=rng.standard_normal((C,K)); k/=np.linalg.norm(k,axis=1,keepdims=True)
    q=rng.standard_normal((C,K)); q/=np.linalg.norm(q,axis=1,keepdims=True)
    if slow: g=-np.exp(np.log(1e-6)+rng.random((C,K))*np.log(1e5))
    else: g=-gscale/(1+np.exp(-(4*rng.random((C,K))-2)))
    G=np.cumsum(g,axis=0)
    # exact fp64
    A=np.zeros((C,C)); Aq=np.zeros((C,C))
    for i in range(C):
        for j in range(i+1):
            e=np.exp(G[i]-G[j]); A[i,j]=np.sum(k[i]*k[j]*e); Aq[i,j]=np.sum(q[i]*k[j]*e)
    # emulation fp32 with per-block refs
    G32=G.astype(np.float32); k32=k.astype(np.float32); q32=q.astype(np.float32)
    reach=0; A32=np.zeros((C,C),np.float32); Aq32=np.zeros((C,C),np.float32)
    with np.errstate(over='raise', under='ignore'):
      for b in range(4):
        r0=16*b
        bmax=G32[r0:r0+16].max(0); pmin=G32[:r0+16].min(0)
        reach=max(reach,(bmax-pmin).max())
        ref=np.float32(0.5)*(bmax+pmin)
        L=k32[r0:r0+16]*np.exp(G32[r0:r0+16]-ref); Lq=q32[r0:r0+16]*np.exp(G32[r0:r0+16]-ref)
        R=k32[:r0+16]*np.exp(ref-G32[:r0+16])
        A32[r0:r0+16,:r0+16]=L@R.T; Aq32[r0:r0+16,:r0+16]=Lq@R.T
    mask=np.tril(np.ones((C,C)))
    err=np.abs((A32*mask)-A).max(); errq=np.abs((Aq32*mask)-Aq).max()
    # inverse: forward substitution diag + block products vs exact
    Ak=np.tril(A,-1)*rng.random(C)[:,None]  # beta-scaled rows
    X=np.linalg.inv(np.eye(C)+Ak)
    Xe=np.zeros((C,C),np.float32); A32k=Ak.astype(np.float32)
    for b in range(4):
        s=16*b; Xe[s:s+16,s:s+16]=np.linalg.inv(np.eye(16,dtype=np.float32)+A32k[s:s+16,s:s+16])
    for b in range(1,4):
        r0=16*b
        P=A32k[r0:r0+16,:r0]@Xe[:r0,:r0]
        Xe[r0:r0+16,:r0]=-Xe[r0:r0+16,r0:r0+16]@P
    return reach, err, errq, np.abs(Xe-X).max()/np.abs(X).max()
for name,sc,slow in [("slow",0,True),("fast5",5,False),("steep20",20,False)]:
    try: print(name, run(sc,slow))
    except FloatingPointError as e: print(name,"overflow",e)
