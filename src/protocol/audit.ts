/** One entry of the audit log as the API shows it (`GET /v1/audit`): what happened, to which grant, by whom, where. */
export interface AuditView {
  at: string;
  event: string;
  grantId: string | null;
  actor: string | null;
  route: string | null;
  client: string | null;
  status: number | null;
  code: string | null;
  detail: string | null;
}
