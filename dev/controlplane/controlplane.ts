/**
 * An envtest-like local control plane: a real etcd and a real kube-apiserver on loopback,
 * with a throw-away PKI, client-certificate authentication and RBAC.
 *
 *   const cp = await startControlPlane()
 *   // cp.kubeconfigPath (admin, group system:masters), cp.mintUser('alice', ['devs']),
 *   // cp.storedApiVersion(group, plural, ns, name) reads the raw object from etcd
 *   await cp.stop()
 *
 * `startControlPlane({ apiservers: 3 })` starts three kube-apiservers on the one etcd, as in
 * an HA cluster: each on its own address 198.18.R.i (see loopback.ts; needs root), all on
 * the same port, each in its own UTS namespace with hostname `kube-apiserver-<i>` (so each
 * has its own identity lease), each publishing itself in the `default/kubernetes`
 * EndpointSlice. Those addresses exist only in a network namespace of the harness, so the
 * calling process must run in one (`await runInNetworkNamespace()` first, see netns.ts; a
 * test file imports test/helpers/network-namespace.ts first): etcd, the servers and
 * whatever the caller starts are in there with it, and the host's network is untouched.
 * `cp.apiservers` lists them (1-based `index`); `cp.server` and `cp.kubeconfigPath` are the
 * first one's. With one server (the default) it listens on 127.0.0.1 (of whichever namespace
 * the caller is in) and is not published there (the API server refuses loopback endpoints).
 *
 * One process can own a control plane and share it: `cp.writeStateFile(path)`, then any
 * other process `attachControlPlane(path)` gets the same interface without owning the
 * processes (scripts/test.mjs does this for the whole test run).
 *
 * This module is the harness's front door; the parts live beside it: types.ts (the
 * interface), start.ts (starting one), owned.ts and attached.ts (the two kinds), base.ts
 * (what both share), controller-manager.ts.
 */
export { ensureBinaries, type ControlPlaneBinaries } from './binaries.js'
export * from './types.js'
export { KUBERNETES_ENDPOINTSLICES } from './owned.js'
export { startControlPlane } from './start.js'
export { attachControlPlane } from './attached.js'
