import { TLS_CA_PATH } from '../../tls-client/index.js';

/** What the one line that joins a host is made of. */
export interface JoinLineParts {
  /** The orchestrator as the host reaches it. */
  url: string;
  /** The agent join grant. */
  grant: string;
  /** The hex SHA-256 of the package the orchestrator serves (`GET /install`). */
  sha256: string;
  /** The CA the grant pins (`sha256:<hex>`) on a TLS mesh, else null. */
  tlsCa: string | null;
}

/**
 * The first half of a TLS join line, before gpumesh is there to do it: fetch the CA certificate trusting nothing,
 * accept it only if its SHA-256 (of the DER bytes) is the fingerprint the line names — the check `ServerTrust` makes
 * for the agent and the CLI — then fetch the package trusting that CA alone, and keep it only if its SHA-256 is the
 * digest the line names. Plain CommonJS for `node -e`, written to survive a POSIX shell's double quotes: no `"`, `$`,
 * backtick or `!` (bash's history expansion). Arguments: the URL, the CA fingerprint, the package's hex digest.
 */
const FETCH_PINNED_SCRIPT = [
  'const[u,p,h]=process.argv.slice(1),c=require(\'crypto\'),n=\'gpumesh-\'+h+\'.tgz\',',
  'x=m=>{console.error(\'gpumesh: \'+m);process.exit(2)},',
  'g=(a,o,f)=>require(\'https\').get(u+a,o,r=>{const b=[];r.on(\'data\',d=>b.push(d)).on(\'end\',()=>f(Buffer.concat(b),r.statusCode))})',
  '.on(\'error\',e=>x(\'cannot fetch \'+u+a+\': \'+e.message));',
  `g('${TLS_CA_PATH}',{rejectUnauthorized:false},b=>{let f='';`,
  'try{f=\'sha256:\'+c.createHash(\'sha256\').update(new c.X509Certificate(b).raw).digest(\'hex\')}catch(e){}',
  'if(f==p)g(\'/install/sha256/\'+h+\'/gpumesh.tgz\',{ca:b},(t,s)=>c.createHash(\'sha256\').update(t).digest(\'hex\')==h',
  '?require(\'fs\').writeFileSync(n,t):x(\'the package at \'+u+\' is not the one the join line names (HTTP \'+s+\')\'));',
  'else x(\'TLS CA mismatch at \'+u+\': the server CA is \'+(f||\'unreadable\')+\', but the join line pins \'+p+\'. Refusing to connect; no grant was sent.\')})',
].join('');

/**
 * The line `gpumesh grant create --agent` prints: it installs this orchestrator's own package with npx (which comes
 * with Node) and starts the agent from it, so a machine with only Node joins — no clone, no registry release.
 *
 * - The package URL names its digest (`/install/sha256/<hex>/gpumesh.tgz`): npx keeps what it installed by the
 *   spec it was given, so a fixed URL would run the first build it ever fetched after the orchestrator was upgraded;
 *   a URL per build installs each build once, and the orchestrator refuses (410) a build it no longer serves.
 * - `--ignore-scripts`: an agent needs none of its dependencies' install scripts, and one of them must not run.
 *   Under npx the package's own `allowScripts` does not apply (npm reads the policy of the project it installs
 *   into, here npx's cache folder), so every script would run: onnxruntime-node's downloads CUDA binaries from
 *   NuGet (hundreds of MB), better-sqlite3's fetches or compiles the SQLite binding, which only the orchestrator's
 *   store loads (the agent never opens a database; the module itself imports without its binding), protobufjs's
 *   prints a notice, and @ffmpeg-installer's `chmod u+x` does what the tarball's file modes already did.
 * - TLS: npm cannot pin a CA (its `ca`/`cafile` settings replace the CAs it trusts for the registry too, and a
 *   `cafile` set on the machine makes it ignore NODE_EXTRA_CA_CERTS), so npm never talks to the orchestrator: Node
 *   fetches the package first, pinned and checked against its digest (FETCH_PINNED_SCRIPT), and npx installs that
 *   file; the agent then pins the CA from its grant as on any other call.
 */
export function joinLine(parts: JoinLineParts): string {
  const url = parts.url.replace(/\/+$/, '');
  const agent = `agent --join ${url} --grant ${parts.grant}`;
  if (!parts.tlsCa) return `npx --yes --ignore-scripts ${url}/install/sha256/${parts.sha256}/gpumesh.tgz ${agent}`;
  return `node -e "${FETCH_PINNED_SCRIPT}" ${url} ${parts.tlsCa} ${parts.sha256} && npx --yes --ignore-scripts ./gpumesh-${parts.sha256}.tgz ${agent}`;
}

/**
 * The line for a host where the `gpumesh` command is installed (`npm install --global`, `npm link` in a checkout; in
 * a checkout itself, `npx gpumesh …`). Not `npx gpumesh` in general: where gpumesh is not installed, npx would look
 * the name up in the npm registry and run whatever package bears it.
 */
export function installedJoinLine(parts: Pick<JoinLineParts, 'url' | 'grant'>): string {
  return `gpumesh agent --join ${parts.url.replace(/\/+$/, '')} --grant ${parts.grant}`;
}
