/**
 * Exec credential plugins (client.authentication.k8s.io v1, v1beta1), run as client-go does:
 * stderr passed through as it comes (login prompts, device codes), our stdin when interactiveMode
 * allows and it is a terminal. credentials.ts decides when to run again.
 */
import { spawn } from 'node:child_process'
import { kubeconfigError as fail, type KubeCluster, type KubeExec } from './kubeconfig.js'

export interface ExecCredentialResult {
  token?: string
  clientCertificate?: { cert: string; key: string }
  /** Epoch milliseconds of `expirationTimestamp`; absent: good until the API server refuses it. */
  expiresAt?: number
}

/** A plugin prints a few kilobytes; anything near this is not an ExecCredential. */
const MAX_OUTPUT_BYTES = 1024 * 1024

/** The terminal a plugin may use: whether our stdin is one, and where its stderr goes. */
export interface ExecTerminal {
  stdinIsTerminal: boolean
  stderr: NodeJS.WritableStream
}

export const processTerminal = (): ExecTerminal => ({ stdinIsTerminal: process.stdin.isTTY === true, stderr: process.stderr })

/** Whether the plugin gets our stdin, as client-go decides; undefined: Always without a terminal, an error. */
export function execInteractive(mode: KubeExec['interactiveMode'], stdinIsTerminal: boolean): boolean | undefined {
  if (mode === 'Never') return false
  if (mode === 'Always' && !stdinIsTerminal) return undefined
  return stdinIsTerminal
}

/** Runs the plugin once and reads its ExecCredential. `user` names the kubeconfig user, for messages. */
export async function runExecPlugin(
  exec: KubeExec,
  cluster: KubeCluster,
  user: string,
  terminal: ExecTerminal = processTerminal(),
): Promise<ExecCredentialResult> {
  const what = `exec plugin ${JSON.stringify(exec.command)} of user ${JSON.stringify(user)}`
  const interactive = execInteractive(exec.interactiveMode, terminal.stdinIsTerminal)
  if (interactive === undefined) {
    throw fail(
      `${what} needs a terminal (interactiveMode: Always), but standard input is not one; ` +
        'run the command in a terminal, or log in with the plugin first and set interactiveMode: IfAvailable',
    )
  }
  const info = {
    apiVersion: exec.apiVersion,
    kind: 'ExecCredential',
    spec: { interactive, ...(exec.provideClusterInfo ? { cluster: clusterInfo(cluster) } : {}) },
  }
  const env = { ...process.env, ...Object.fromEntries(exec.env.map((e) => [e.name, e.value])), KUBERNETES_EXEC_INFO: JSON.stringify(info) }
  const { code, signal, stdout, stderr } = await run(exec, env, what, interactive, terminal.stderr)
  if (code !== 0) {
    const said = stderr.trim().slice(-2000)
    throw fail(`${what} failed (${signal ?? `exit ${code}`})${said ? `: ${said}` : ''}`)
  }
  return readExecCredential(stdout, exec.apiVersion, what)
}

/** Checks the plugin's output as client-go does: the configured apiVersion, kind, and a usable status. */
export function readExecCredential(stdout: string, apiVersion: string, what: string): ExecCredentialResult {
  let out: unknown
  try {
    out = JSON.parse(stdout)
  } catch {
    throw fail(`${what} did not print an ExecCredential as JSON (it printed ${JSON.stringify(stdout.slice(0, 200))})`)
  }
  const credential = out as {
    apiVersion?: unknown
    kind?: unknown
    status?: { token?: unknown; clientCertificateData?: unknown; clientKeyData?: unknown; expirationTimestamp?: unknown }
  }
  if (credential?.kind !== 'ExecCredential') throw fail(`${what} printed a ${String(credential?.kind)}, not an ExecCredential`)
  if (credential.apiVersion !== apiVersion) {
    throw fail(`${what} is configured for ${apiVersion}, but printed an ExecCredential of ${String(credential.apiVersion)}`)
  }
  const status = credential.status
  if (typeof status !== 'object' || status === null) throw fail(`${what} printed an ExecCredential without a status`)
  const result: ExecCredentialResult = {}
  if (typeof status.token === 'string' && status.token !== '') result.token = status.token
  const cert = status.clientCertificateData
  const key = status.clientKeyData
  if ((typeof cert === 'string' && cert !== '') !== (typeof key === 'string' && key !== '')) {
    throw fail(`${what} printed clientCertificateData without clientKeyData, or the other way round`)
  }
  if (typeof cert === 'string' && cert !== '') result.clientCertificate = { cert, key: key as string }
  if (!result.token && !result.clientCertificate)
    throw fail(`${what} printed an ExecCredential with neither a token nor a client certificate`)
  if (status.expirationTimestamp !== undefined && status.expirationTimestamp !== null) {
    const at = typeof status.expirationTimestamp === 'string' ? Date.parse(status.expirationTimestamp) : Number.NaN
    if (Number.isNaN(at))
      throw fail(`${what} printed an expirationTimestamp that is not a time: ${JSON.stringify(status.expirationTimestamp)}`)
    result.expiresAt = at
  }
  return result
}

/** The cluster as the plugin sees it with provideClusterInfo (client.authentication.k8s.io Cluster). */
function clusterInfo(cluster: KubeCluster): Record<string, unknown> {
  return {
    server: cluster.server.href.replace(/\/$/, ''),
    ...(cluster.tlsServerName ? { 'tls-server-name': cluster.tlsServerName } : {}),
    ...(cluster.insecureSkipTlsVerify ? { 'insecure-skip-tls-verify': true } : {}),
    ...(cluster.certificateAuthorityData
      ? { 'certificate-authority-data': Buffer.from(cluster.certificateAuthorityData).toString('base64') }
      : {}),
    ...(cluster.proxyUrl ? { 'proxy-url': cluster.proxyUrl.href } : {}),
    ...(cluster.execExtension !== undefined ? { config: cluster.execExtension } : {}),
  }
}

function run(
  { command, args, installHint }: KubeExec,
  env: NodeJS.ProcessEnv,
  what: string,
  interactive: boolean,
  userStderr: NodeJS.WritableStream,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    // stdout is the ExecCredential; stdin only for an interactive plugin (client-go's way).
    const child = spawn(command, args, { env, stdio: [interactive ? 'inherit' : 'ignore', 'pipe', 'pipe'] })
    const out: Buffer[] = []
    const err: Buffer[] = []
    let size = 0
    child.stdout.on('data', (c: Buffer) => {
      size += c.length
      if (size > MAX_OUTPUT_BYTES) child.kill('SIGKILL')
      else out.push(c)
    })
    child.stderr.on('data', (c: Buffer) => {
      // The user sees what the plugin says (a prompt, a device code) as it says it; the tail also goes into a failure's message.
      userStderr.write(c)
      err.push(c)
      if (err.length > 64) err.shift()
    })
    child.on('error', (e: NodeJS.ErrnoException) => {
      const hint = installHint ? `\n${installHint.trim()}` : ''
      reject(fail(e.code === 'ENOENT' ? `${what} not found${hint}` : `${what} could not be started: ${e.message}${hint}`))
    })
    child.on('close', (code, signal) => {
      if (size > MAX_OUTPUT_BYTES) return reject(fail(`${what} printed more than ${MAX_OUTPUT_BYTES} bytes`))
      resolve({ code, signal, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') })
    })
  })
}
