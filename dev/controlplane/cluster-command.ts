/**
 * `npm run cluster` (dev/main.ts `cluster`): start a local control plane for manual use, print how to reach it,
 * and stop it cleanly on Ctrl-C / SIGTERM. With several API servers the command first runs
 * itself again inside a network namespace of its own (netns.ts), where the servers' addresses
 * live, and says how to get in there (`ip netns exec <name> ...`).
 */
import { ensureBinaries, startControlPlane, type ControlPlaneOptions } from './controlplane.js'
import { startCertManager, type CertManager } from './cert-manager.js'
import { runInNetworkNamespace } from './netns.js'
import { ensureTools } from './tools.js'

export interface ClusterCommandOptions extends Pick<
  ControlPlaneOptions,
  'apiservers' | 'controllerManager' | 'extraApiserverFlags' | 'readyTimeoutMs'
> {
  /** Where the shell snippet goes; default stdout. Progress goes to stderr. */
  out?: NodeJS.WritableStream
  /** Also write the state file for `attachControlPlane` here. */
  stateFile?: string
  /** Also install cert-manager's CRDs and run cert-manager (cert-manager.ts). */
  certManager?: boolean
}

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const

/**
 * Resolves with the process exit code once the control plane has been stopped. With several
 * API servers, call it only as the process's command (the CLI): outside a network namespace
 * of the harness it runs `process.argv` again inside one and exits with that run's status.
 */
export async function runClusterCommand(opts: ClusterCommandOptions = {}): Promise<number> {
  const out = opts.out ?? process.stdout
  const err = (msg: string): void => {
    process.stderr.write(`${msg}\n`)
  }
  const several = (opts.apiservers ?? 1) > 1
  const netns = several
    ? await runInNetworkNamespace({
        prepare: async () => {
          err('building the control plane first if needed (the first run takes several minutes)...')
          await ensureBinaries()
          // Go modules cannot be fetched from inside the namespace.
          if (opts.certManager) await ensureTools()
        },
        log: err,
      })
    : undefined

  // Handle the signals ourselves before anything starts (the harness then leaves them to us).
  let received: NodeJS.Signals | undefined
  let wake: (() => void) | undefined
  const onSignal = (sig: NodeJS.Signals): void => {
    if (received) {
      err(`received ${sig} again; exiting without waiting`)
      process.exit(130) // the exit hook kills the children synchronously
    }
    received = sig
    wake?.()
  }
  for (const s of SIGNALS) process.on(s, onSignal)

  try {
    err(
      `starting etcd and ${several ? `${opts.apiservers} kube-apiservers` : 'kube-apiserver'} ` +
        '(the first run builds them, which takes several minutes)...',
    )
    const { out: _out, stateFile: _stateFile, certManager: withCertManager, ...cpOpts } = opts
    const cp = await startControlPlane({ ...cpOpts, log: (m) => err(`  ${m}`) })
    let certManager: CertManager | undefined
    if (withCertManager && !received) {
      err('starting cert-manager (the first run builds it, which takes a few minutes)...')
      try {
        certManager = await startCertManager(cp, { log: (m) => err(`  ${m}`) })
      } catch (e) {
        await cp.stop()
        throw e
      }
    }
    if (opts.stateFile) await cp.writeStateFile(opts.stateFile)
    const lines = [
      `# crd-migrator local control plane (ready in ${cp.timings?.readyMs ?? '?'}ms; Ctrl-C stops it)`,
      `export KUBECONFIG=${cp.kubeconfigPath}`,
    ]
    if (netns) {
      lines.push(
        `# network namespace ${netns}: these addresses (and etcd's) exist only in there; run commands in it, e.g.`,
        `#   ip netns exec ${netns} kubectl --kubeconfig ${cp.kubeconfigPath} get endpointslices`,
        `#   ip netns exec ${netns} $SHELL`,
      )
    }
    if (several) {
      lines.push(`# ${cp.apiservers.length} API servers on one etcd, each in the default/kubernetes EndpointSlice (KUBECONFIG: the first):`)
      for (const a of cp.apiservers) {
        lines.push(`#   ${a.index}: ${a.server}  KUBECONFIG=${a.kubeconfigPath}  log: ${cp.logFiles?.apiservers[a.index - 1] ?? '-'}`)
      }
    } else {
      lines.push(`# server: ${cp.server}`)
    }
    lines.push(
      `# etcd:   ${cp.etcdEndpoint}`,
      `# admin:  ${cp.adminUser.name} (groups: ${cp.adminUser.groups.join(', ')})`,
      ...(cp.logFiles?.controllerManager
        ? [`# kube-controller-manager (built-in storage version migrator) log: ${cp.logFiles.controllerManager}`]
        : []),
      ...(certManager
        ? [
            `# cert-manager (controller + cainjector, ${certManager.crds.length} CRDs; ready in ${certManager.readyMs}ms) log: ${certManager.logFile}`,
          ]
        : []),
      several
        ? `# logs:   ${cp.logFiles?.etcd ?? '-'} (the API servers' above)`
        : `# logs:   ${cp.logFiles ? `${cp.logFiles.apiserver} ${cp.logFiles.etcd}` : '-'}`,
      '',
    )
    out.write(lines.join('\n'))

    if (!received) {
      // A ref'd timer keeps Node alive while we wait (the children are unref'd).
      const keepAlive = setInterval(() => {}, 1 << 30)
      await new Promise<void>((resolve) => {
        wake = resolve
      })
      clearInterval(keepAlive)
    }
    err(`${received}: stopping the control plane...`)
    await certManager?.stop()
    await cp.stop()
    err('stopped.')
    return 0
  } catch (e) {
    err(`npm run cluster: ${e instanceof Error ? e.message : String(e)}`)
    return 1
  } finally {
    for (const s of SIGNALS) process.removeListener(s, onSignal)
  }
}
