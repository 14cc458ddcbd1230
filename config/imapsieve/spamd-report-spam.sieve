# A message copied or moved into Junk by a person: train spamd with it as spam.
require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];

if environment :matches "imap.user" "*" {
  set "username" "${1}";
}

pipe :copy "spamd-learn" [ "spam", "${username}" ];
