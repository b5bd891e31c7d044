/**
 * The environment's proxy for an API server, as Go's http.ProxyFromEnvironment picks it
 * (NO_PROXY: `*`, IPs, CIDRs, domains with their subdomains, optional `:port`; loopback never
 * proxied). Chosen here because Node's own NO_PROXY matching knows no CIDRs.
 */
import { BlockList, isIP } from 'node:net'
import { domainToASCII } from 'node:url'
import { kubeconfigError } from './kubeconfig.js'

export type ProxyEnvironment = Readonly<Record<string, string | undefined>>

const DEFAULT_PORT: Record<string, string> = { 'https:': '443', 'http:': '80' }

/** The proxy the environment sets for `server`, or undefined (none set, or NO_PROXY covers it). */
export function proxyFromEnvironment(server: URL, env: ProxyEnvironment): URL | undefined {
  const https = server.protocol === 'https:'
  const name = https ? 'HTTPS_PROXY' : 'HTTP_PROXY'
  const [variable, value] = firstSet(env, name, name.toLowerCase())
  if (value === undefined) return undefined
  const host = server.hostname.replace(/^\[|\]$/g, '').toLowerCase()
  const port = server.port || DEFAULT_PORT[server.protocol] || ''
  const [, noProxy] = firstSet(env, 'NO_PROXY', 'no_proxy')
  // A proxy this server does not use is not judged: the settings may be for other programs.
  return bypassed(host, port, noProxy ?? '') ? undefined : parseProxy(variable, value)
}

function firstSet(env: ProxyEnvironment, ...names: string[]): [string, string | undefined] {
  for (const name of names) {
    const value = env[name]
    if (value) return [name, value]
  }
  return [names[0]!, undefined]
}

function parseProxy(variable: string, value: string): URL {
  // As Go: a value without a scheme (proxy.example.com:3128) is an http:// proxy.
  const text = value.includes('://') ? value : `http://${value}`
  const url = URL.canParse(text) ? new URL(text) : undefined
  const invalid = (why: string) => kubeconfigError(`${variable} ${JSON.stringify(value)}${why}`)
  if (!url || !url.hostname || !['http:', 'https:', 'socks5:'].includes(url.protocol))
    throw invalid(' is not a proxy URL such as http://proxy.example.com:3128')
  if (url.protocol === 'socks5:')
    throw invalid(': only http:// and https:// proxies are supported, not socks5; unset it or add the API server to NO_PROXY')
  return url
}

function bypassed(host: string, port: string, noProxy: string): boolean {
  if (host === 'localhost') return true
  const ipType = ipFamily(host)
  if (ipType && loopback.check(host, ipType)) return true
  for (const raw of noProxy.split(',')) {
    const entry = raw.trim().toLowerCase()
    if (!entry) continue
    if (entry === '*') return true
    const cidr = /^(.+)\/(\d{1,3})$/.exec(entry)
    if (cidr) {
      const family = ipFamily(cidr[1]!)
      const prefix = Number(cidr[2])
      if (family && ipType && prefix <= (family === 'ipv4' ? 32 : 128)) {
        const net = new BlockList()
        net.addSubnet(cidr[1]!, prefix, family)
        if (net.check(host, ipType)) return true
      }
      continue
    }
    const { name, port: wanted } = splitHostPort(entry)
    if (!name) continue
    const portMatches = wanted === '' || wanted === port
    const entryType = ipFamily(name)
    if (entryType) {
      if (ipType && portMatches && sameIp(name, entryType, host, ipType)) return true
      continue
    }
    if (ipType) continue // domains never cover an address
    const matchHost = !name.startsWith('.') && !name.startsWith('*.')
    const suffix = domainToASCII(name.startsWith('*.') ? name.slice(1) : matchHost ? `.${name}` : name) || name
    if ((host.endsWith(suffix) || (matchHost && host === suffix.slice(1))) && portMatches) return true
  }
  return false
}

const loopback = new BlockList()
loopback.addSubnet('127.0.0.0', 8, 'ipv4')
loopback.addAddress('::1', 'ipv6')

function ipFamily(text: string): 'ipv4' | 'ipv6' | undefined {
  const v = isIP(text)
  return v === 4 ? 'ipv4' : v === 6 ? 'ipv6' : undefined
}

function sameIp(a: string, aType: 'ipv4' | 'ipv6', b: string, bType: 'ipv4' | 'ipv6'): boolean {
  const one = new BlockList()
  one.addAddress(a, aType)
  return one.check(b, bType)
}

/** `host:port`, `[v6]:port`, a bare v6 address, or a host alone. */
function splitHostPort(entry: string): { name: string; port: string } {
  const bracketed = /^\[([^\]]*)\](?::(\d*))?$/.exec(entry)
  if (bracketed) return { name: bracketed[1]!, port: bracketed[2] ?? '' }
  if (isIP(entry) === 6) return { name: entry, port: '' }
  const m = /^(.*):(\d+)$/.exec(entry)
  return m ? { name: m[1]!, port: m[2]! } : { name: entry, port: '' }
}
