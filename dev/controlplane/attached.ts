/** A control plane another process owns, attached from its state file (scripts/test.mjs shares one per test run). */
import { randomBytes } from 'node:crypto'
import { readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type CertKeyPair } from './pki.js'
import { currentNetworkNamespace } from './netns.js'
import { releaseDirAtExit, removeDirAtExit } from './process.js'
import type { ControlPlaneState, ControlPlane } from './types.js'
import { ControlPlaneBase } from './base.js'

export class AttachedControlPlane extends ControlPlaneBase {
  readonly owned = false
  readonly networkNamespace: string | undefined

  constructor(
    private readonly state: ControlPlaneState,
    ca: CertKeyPair,
    admin: CertKeyPair,
    usersDir: string,
  ) {
    super(
      state.dir,
      state.apiservers ?? [
        { index: 1, server: state.server, address: new URL(state.server).hostname, kubeconfigPath: state.kubeconfigPath },
      ],
      state.etcdEndpoint,
      ca,
      admin,
      usersDir,
    )
    this.networkNamespace = state.networkNamespace
  }

  async writeStateFile(path: string): Promise<void> {
    await writeFile(path, JSON.stringify(this.state, null, 2), { mode: 0o600 })
  }

  private notOwned(): Promise<never> {
    return Promise.reject(
      new Error(
        'this control plane is shared (attached from a state file); start a private one with startControlPlane() to stop or restart its processes',
      ),
    )
  }

  restartApiserver(): Promise<void> {
    return this.notOwned()
  }
  stopApiserver(): Promise<void> {
    return this.notOwned()
  }
  startApiserver(): Promise<void> {
    return this.notOwned()
  }
  pauseApiserver(): Promise<void> {
    return this.notOwned()
  }
  resumeApiserver(): Promise<void> {
    return this.notOwned()
  }
  stopEtcd(): Promise<void> {
    return this.notOwned()
  }
  startEtcd(): Promise<void> {
    return this.notOwned()
  }
  stopControllerManager(): Promise<void> {
    return this.notOwned()
  }
  startControllerManager(): Promise<void> {
    return this.notOwned()
  }
  pauseControllerManager(): Promise<void> {
    return this.notOwned()
  }
  resumeControllerManager(): Promise<void> {
    return this.notOwned()
  }

  async stop(): Promise<void> {
    this.closeClients()
    await rm(this.usersDir, { recursive: true, force: true })
    releaseDirAtExit(this.usersDir)
  }
}

/** Attach to a control plane another process started (see {@link ControlPlane.writeStateFile}). */
export async function attachControlPlane(stateFile: string): Promise<ControlPlane> {
  const state = JSON.parse(await readFile(stateFile, 'utf8')) as ControlPlaneState
  if (state.version !== 1) throw new Error(`${stateFile}: unsupported control-plane state version ${String(state.version)}`)
  if (state.networkNamespace !== undefined && currentNetworkNamespace() !== state.networkNamespace) {
    throw new Error(
      `${stateFile}: this control plane runs in network namespace ${state.networkNamespace}, unreachable from this process ` +
        `(${currentNetworkNamespace() ?? "the host's namespace"}); attach from a process inside it (ip netns exec ${state.networkNamespace} ...)`,
    )
  }
  const [caCert, caKey, adminCert, adminKey] = await Promise.all(
    [state.caCertPath, state.caKeyPath, state.adminCertPath, state.adminKeyPath].map((p) => readFile(p, 'utf8')),
  )
  const usersDir = join(tmpdir(), `crd-migrator-users-${process.pid}-${randomBytes(4).toString('hex')}`)
  removeDirAtExit(usersDir)
  return new AttachedControlPlane(state, { certPem: caCert!, keyPem: caKey! }, { certPem: adminCert!, keyPem: adminKey! }, usersDir)
}
