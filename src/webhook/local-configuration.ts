/**
 * `crd-migrator webhook-config`: the url variant, for a webhook outside the cluster. Works
 * from an installed package (no repository path assumed); every bad input is a ConfigError
 * (exit 2), never a stack of ENOENT.
 */
import { X509Certificate } from 'node:crypto'
import { mkdir, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'
import { ANNOTATION_KEY } from '../config/schema.js'
import { ConfigError, errorMessage } from '../errors.js'
import { FileRefused, MAX_CREDENTIAL_FILE_BYTES, readRegularFileSync } from '../regular-file.js'
import { renderWebhookConfigurationYaml, type WebhookConfigurationOptions } from './configuration.js'

type Flag =
  'ca' | 'caBundle' | 'host' | 'port' | 'out' | 'migratingAnnotation' | 'migratorUsers' | 'migratorGroups' | 'builtinMigratorUsers'
/** commander's options of `webhook-config`: each flag's text, or undefined when not given. */
export type WebhookConfigFlags = Partial<Record<Flag, string>>

/** What the flags ask for, checked; the CA still to be read when it is a file. */
export interface WebhookConfigInputs {
  ca: { file: string } | { pem: string }
  host: string
  port: number
  /** undefined: stdout (no --out, or `--out -`). */
  outFile: string | undefined
  /** What the rendered configuration is asked to differ in from the defaults. */
  render: Pick<WebhookConfigurationOptions, 'annotationKey' | 'migratorUsers' | 'migratorGroups' | 'builtinMigratorUsers'>
}

export const DEFAULT_LOCAL_HOST = '127.0.0.1'
export const DEFAULT_LOCAL_PORT = 9443

const list = (v: string | undefined) =>
  v === undefined
    ? undefined
    : v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean)

/** The flags checked, without touching the file system (the CA file is read by readCaPem). */
export function webhookConfigInputs(flags: WebhookConfigFlags): WebhookConfigInputs {
  const say = (message: string) => new ConfigError(`webhook-config: ${message}`)
  if (flags.ca !== undefined && flags.caBundle !== undefined) throw say('give --ca FILE or --ca-bundle BASE64, not both')
  let ca: WebhookConfigInputs['ca']
  if (flags.ca !== undefined) {
    if (flags.ca.trim() === '') throw say('--ca needs a file name')
    ca = { file: flags.ca }
  } else if (flags.caBundle !== undefined) {
    ca = { pem: pemFromBundle(flags.caBundle) }
  } else {
    throw say('name the CA that signed the webhook serving certificate: --ca FILE (PEM), or --ca-bundle BASE64 (the caBundle value itself)')
  }
  const host = (flags.host ?? DEFAULT_LOCAL_HOST).trim()
  if (host === '') throw say('--host must not be empty')
  if (/[\s/?#@]/.test(host)) throw say(`--host ${JSON.stringify(host)} is not a host name or IP address`)
  const portText = (flags.port ?? String(DEFAULT_LOCAL_PORT)).trim()
  const port = /^\d+$/.test(portText) ? Number(portText) : NaN
  if (!(port >= 1 && port <= 65535)) throw say(`--port must be a whole number from 1 to 65535, got ${JSON.stringify(flags.port)}`)
  if (flags.migratingAnnotation !== undefined && !ANNOTATION_KEY.test(flags.migratingAnnotation))
    throw say(`--migrating-annotation ${JSON.stringify(flags.migratingAnnotation)} is not a valid annotation key`)
  if (flags.out !== undefined && flags.out.trim() === '') throw say('--out needs a file name, or - for stdout')
  return {
    ca,
    host,
    port,
    outFile: flags.out === undefined || flags.out === '-' ? undefined : flags.out,
    render: {
      annotationKey: flags.migratingAnnotation,
      migratorUsers: list(flags.migratorUsers),
      migratorGroups: list(flags.migratorGroups),
      builtinMigratorUsers: list(flags.builtinMigratorUsers),
    },
  }
}

/** `--ca-bundle`: base64 of one or more PEM certificates, as a caBundle holds them. */
function pemFromBundle(bundle: string): string {
  const compact = bundle.replace(/\s+/g, '')
  if (compact === '' || !/^[A-Za-z0-9+/]+={0,2}$/.test(compact))
    throw new ConfigError('webhook-config: --ca-bundle is not base64 (give the caBundle value: base64 of the PEM CA certificate)')
  return checkedPem(Buffer.from(compact, 'base64').toString('utf8'), '--ca-bundle')
}

export function readCaPem(ca: WebhookConfigInputs['ca']): string {
  if ('pem' in ca) return ca.pem
  let text: string
  try {
    // Through regular-file.ts: a FIFO or a device named by --ca is refused at once, not waited on.
    text = readRegularFileSync(ca.file, {
      what: `webhook-config: --ca ${ca.file}`,
      code: 'CRDM_CONFIG_INVALID',
      maxBytes: MAX_CREDENTIAL_FILE_BYTES,
      hint: 'name the CA certificate file itself (a FIFO or a device is refused, never waited on or read)',
    }).toString('utf8')
  } catch (err) {
    if (err instanceof FileRefused) throw new ConfigError(err.message, { cause: err })
    throw new ConfigError(`webhook-config: cannot read --ca ${ca.file}: ${errorMessage(err)}`, { cause: err })
  }
  return checkedPem(text, `--ca ${ca.file}`)
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g

/** Text that holds at least one PEM certificate, each one parsable; nothing else counts as a CA. */
export function checkedPem(text: string, source: string): string {
  const blocks = text.match(PEM_CERTIFICATE) ?? []
  if (blocks.length === 0)
    throw new ConfigError(`webhook-config: ${source} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)`)
  for (const block of blocks) {
    try {
      new X509Certificate(block)
    } catch (err) {
      throw new ConfigError(`webhook-config: ${source} holds a PEM block that is not a certificate: ${errorMessage(err)}`, {
        cause: err,
      })
    }
  }
  return text
}

export function localWebhookConfigurationYaml(inputs: WebhookConfigInputs, caPem: string): string {
  const urlHost = inputs.host.includes(':') ? `[${inputs.host}]` : inputs.host
  const url = `https://${urlHost}:${inputs.port}/validate-crd`
  const yaml = renderWebhookConfigurationYaml({ mode: 'url', url, caBundlePem: caPem, ...inputs.render })
  return `# Generated by crd-migrator webhook-config for a webhook at ${url}\n${yaml}`
}

/** `--out FILE`: its directory created as needed; a file that cannot be written is a usage error. */
export async function writeOutFile(file: string, text: string): Promise<void> {
  try {
    await mkdir(dirname(file), { recursive: true })
    await writeFile(file, text)
  } catch (err) {
    throw new ConfigError(`webhook-config: cannot write --out ${file}: ${errorMessage(err)}`, { cause: err })
  }
}
