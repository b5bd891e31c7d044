/**
 * Import this FIRST in a test file that starts several API servers:
 *
 *   import { networkNamespace } from './network-namespace.js'
 *
 * The file then runs inside a network namespace of its own (dev/controlplane/netns.ts):
 * tap's process builds the control-plane binaries if needed (that needs the host's
 * network), makes the namespace, runs the same file again in it and only relays (TAP output
 * straight through, tap's IPC messages and signals both ways), then removes the namespace.
 * Inside, the API servers' addresses, etcd, the webhooks and the code under test share the
 * namespace, and the host's network configuration is never touched. The shared control
 * plane of `npm test` lives in the host's namespace, out of reach: getControlPlane() starts
 * a private one in here instead.
 */
import t from 'tap'
import { ensureBinaries } from '../../dev/controlplane/binaries.js'
import { runInNetworkNamespace } from '../../dev/controlplane/netns.js'

/** The namespace's name (`crdm-<pid>-<hex>`); this module never finishes loading outside one. */
export const networkNamespace: string = await runInNetworkNamespace({
  prepare: async () => {
    // A cold build takes many minutes; keep tap's per-file timeout off it.
    t.setTimeout(60 * 60 * 1000)
    await ensureBinaries()
  },
  // This process only waits for the copy, whose own TAP root keeps the time (and tells tap's
  // runner): a timer here would print a timeout into the copy's TAP stream.
  beforeSpawn: () => t.setTimeout(0),
})
