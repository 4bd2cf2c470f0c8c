package cmd

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube/access"
)

func newReadOnlyKubeconfigCmd(g *globalFlags) *cobra.Command {
	var out string
	var valid time.Duration
	var revoke bool
	cmd := &cobra.Command{
		Use:   "readonly-kubeconfig --out FILE [--valid 720h] | --revoke",
		Short: "A kubeconfig that may read the cluster and change nothing, for a technician's read-only account",
		Long: `Write a kubeconfig for the cluster's read-only account (ServiceAccount
kube-system/` + access.ReadOnlyName + `, made on first use): it reads what the console,
sitecon status and the doctor read, and the API server refuses it every
write, every Secret and every VM console. Give it to a technician's
read-only SSH account (the file is written 0600: chown it to that account);
the console run with it offers no action and says why. --readonly and
SITECON_READONLY are sitecon's own word, which an account can turn off; this
is the cluster's.

The token in it is valid for --valid (the API server may cap it). --revoke
ends every token handed out so far (the account is made afresh); write new
kubeconfigs after it. Both are recorded in the audit log.`,
		Example: `  sitecon readonly-kubeconfig --out /home/tech/.kube/config && chown tech /home/tech/.kube/config
  sitecon readonly-kubeconfig --revoke`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (out == "") == !revoke {
				return fmt.Errorf("give --out FILE to write a kubeconfig, or --revoke to end the ones handed out")
			}
			action, target := "readonly-kubeconfig", out
			if revoke {
				action, target = "readonly-revoke", access.ReadOnlyName
			}
			rec := audit.Record{Action: action, Target: target, Detail: fmt.Sprintf("valid %s", valid)}
			if g.readOnly {
				return refuseReadOnly(g, rec, fmt.Errorf("read-only mode (--readonly or SITECON_READONLY): %s not run (it hands out access)", action))
			}
			log, err := audit.Open(g.auditLog)
			if err != nil {
				return fmt.Errorf("%s not run (it hands out access, and who asked cannot be recorded): %w", action, err)
			}
			entry, err := log.Begin(rec)
			if err != nil {
				return err
			}
			err = func() error {
				cfg, err := g.restConfig()
				if err != nil {
					return err
				}
				cs, err := kubernetes.NewForConfig(cfg)
				if err != nil {
					return err
				}
				ctx := cmd.Context()
				if revoke {
					if err := access.RevokeReadOnlyTokens(ctx, cs); err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "every token of the read-only account %s/%s is revoked; write new kubeconfigs with --out\n", access.ReadOnlyNamespace, access.ReadOnlyName)
					return nil
				}
				if err := access.EnsureReadOnlyAccount(ctx, cs); err != nil {
					return err
				}
				token, expires, err := access.ReadOnlyToken(ctx, cs, valid)
				if err != nil {
					return err
				}
				ca := cfg.CAData
				if len(ca) == 0 && cfg.CAFile != "" {
					if ca, err = os.ReadFile(cfg.CAFile); err != nil {
						return fmt.Errorf("the cluster's CA: %w", err)
					}
				}
				kc := clientcmdapi.NewConfig()
				kc.Clusters["sitecon"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca, TLSServerName: cfg.ServerName}
				kc.AuthInfos[access.ReadOnlyName] = &clientcmdapi.AuthInfo{Token: token}
				kc.Contexts["sitecon-readonly"] = &clientcmdapi.Context{Cluster: "sitecon", AuthInfo: access.ReadOnlyName}
				kc.CurrentContext = "sitecon-readonly"
				data, err := clientcmd.Write(*kc)
				if err != nil {
					return err
				}
				if err := config.WriteFileAtomic(out, data, 0o600); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: reads the cluster, changes nothing; valid until %s (sitecon readonly-kubeconfig --revoke ends it sooner)\n",
					out, expires.Local().Format(time.DateTime))
				return nil
			}()
			outcome := audit.OutcomeDone
			if err != nil {
				outcome = audit.OutcomeFailed
			}
			if endErr := entry.End(outcome, err); err == nil && endErr != nil {
				return endErr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "where to write the kubeconfig (0600)")
	cmd.Flags().DurationVar(&valid, "valid", 30*24*time.Hour, "how long its token is valid")
	cmd.Flags().BoolVar(&revoke, "revoke", false, "end every token of the read-only account handed out so far")
	return cmd
}
